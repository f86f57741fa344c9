package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"golang.org/x/time/rate"

	"github.com/chatd/chatd/transport"
)

// MinSecretBytes is the shortest HMAC secret accepted: HS256 wants a key at least as long
// as its hash (RFC 7518, section 3.2).
const MinSecretBytes = 32

// Defaults for Config's zero fields.
const (
	DefaultJWKSRefreshInterval = time.Hour
	// DefaultUnknownKIDInterval is how often at most a token with a key id the cached
	// set does not hold makes chatd fetch the set again: often enough to follow a key
	// rotation at once, rarely enough that made-up key ids cannot make chatd hammer the
	// identity provider.
	DefaultUnknownKIDInterval = 30 * time.Second
	DefaultJWKSTimeout        = 10 * time.Second
)

// ErrUnauthorized is wrapped by every error of a refused token.
var ErrUnauthorized = errors.New("unauthorized")

// The algorithms each key type accepts.
var (
	hmacMethods   = []string{"HS256", "HS384", "HS512"}
	publicMethods = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)

// Config configures a JWT verifier. Exactly one of Secret and JWKSURL is set.
type Config struct {
	// Secret is the HMAC key (CHATD_JWT_SECRET): HS256, HS384 and HS512 tokens.
	Secret []byte
	// JWKSURL is where the identity provider publishes its public keys as a JWK Set
	// (CHATD_JWKS_URL): RSA, RSA-PSS, ECDSA and EdDSA tokens.
	JWKSURL string
	// Issuer, when set, must be the token's iss (CHATD_JWT_ISSUER).
	Issuer string
	// Audience, when set, must be among the token's aud (CHATD_JWT_AUDIENCE).
	Audience string
	// Leeway is the clock skew allowed on exp and nbf.
	Leeway time.Duration
	// Clock is the time exp and nbf are checked against. Defaults to the real clock.
	Clock clockwork.Clock
	// HTTPClient fetches the JWK Set. Defaults to a client with DefaultJWKSTimeout.
	HTTPClient *http.Client
	// JWKSRefreshInterval is how often the JWK Set is fetched again in the background.
	JWKSRefreshInterval time.Duration
	// UnknownKIDInterval is how often at most a token with an unknown key id makes the
	// verifier fetch the JWK Set again.
	UnknownKIDInterval time.Duration
	// Logger logs JWK Set fetches that failed.
	Logger zerolog.Logger
}

// JWT verifies tokens. It is a transport.ExpiringAuthenticator.
type JWT struct {
	parser  *jwt.Parser
	keyfunc jwt.Keyfunc
	cancel  context.CancelFunc
}

var _ transport.ExpiringAuthenticator = (*JWT)(nil)

// New returns a verifier. With a JWKSURL it fetches the set once (a failure is logged,
// not returned: the set is fetched again when a token needs it) and keeps it fresh in the
// background until Close.
func New(cfg Config) (*JWT, error) {
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	opts := []jwt.ParserOption{
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(cfg.Clock.Now),
		jwt.WithLeeway(cfg.Leeway),
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	j := &JWT{cancel: func() {}}
	switch {
	case len(cfg.Secret) > 0 && cfg.JWKSURL != "":
		return nil, errors.New("auth: set either an HMAC secret or a JWKS URL, not both")
	case len(cfg.Secret) > 0:
		if len(cfg.Secret) < MinSecretBytes {
			return nil, fmt.Errorf("auth: the HMAC secret is %d bytes; it must be at least %d", len(cfg.Secret), MinSecretBytes)
		}
		secret := cfg.Secret
		j.keyfunc = func(*jwt.Token) (any, error) { return secret, nil }
		opts = append(opts, jwt.WithValidMethods(hmacMethods))
	case cfg.JWKSURL != "":
		u, err := url.Parse(cfg.JWKSURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("auth: the JWKS URL %q is not an http:// or https:// URL", cfg.JWKSURL)
		}
		kf, cancel, err := newJWKS(cfg)
		if err != nil {
			return nil, err
		}
		j.keyfunc, j.cancel = kf, cancel
		opts = append(opts, jwt.WithValidMethods(publicMethods))
	default:
		return nil, errors.New("auth: set an HMAC secret or a JWKS URL")
	}
	j.parser = jwt.NewParser(opts...)
	return j, nil
}

func newJWKS(cfg Config) (jwt.Keyfunc, context.CancelFunc, error) {
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: DefaultJWKSTimeout}
	}
	refresh := cfg.JWKSRefreshInterval
	if refresh <= 0 {
		refresh = DefaultJWKSRefreshInterval
	}
	unknown := cfg.UnknownKIDInterval
	if unknown <= 0 {
		unknown = DefaultUnknownKIDInterval
	}
	log := cfg.Logger
	ctx, cancel := context.WithCancel(context.Background())
	kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{cfg.JWKSURL}, keyfunc.Override{
		Client:          client,
		RefreshInterval: refresh,
		// One fetch per interval for unknown key ids. The wait bounds the limiter's wait
		// and the fetch together (jwkset uses one context for both): a token that finds
		// the limiter spent for longer is refused at once (rate.Limiter.Wait gives up
		// when the deadline comes first), and the fetch has the client's whole timeout.
		RefreshUnknownKID: rate.NewLimiter(rate.Every(unknown), 1),
		RateLimitWaitMax:  max(client.Timeout, time.Second),
		RefreshErrorHandlerFunc: func(u string) func(context.Context, error) {
			return func(_ context.Context, err error) {
				log.Warn().Err(err).Str("url", u).Msg("fetching the JWK Set failed")
			}
		},
	})
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("auth: JWKS %s: %w", cfg.JWKSURL, err)
	}
	return kf.Keyfunc, cancel, nil
}

// Close stops the JWK Set's background refresh.
func (j *JWT) Close() { j.cancel() }

// Authenticate returns the token's subject.
func (j *JWT) Authenticate(ctx context.Context, r *http.Request, token string) (string, error) {
	user, _, err := j.AuthenticateExpiry(ctx, r, token)
	return user, err
}

// AuthenticateExpiry returns the token's subject and expiry. Every refusal wraps
// ErrUnauthorized.
func (j *JWT) AuthenticateExpiry(_ context.Context, _ *http.Request, token string) (string, time.Time, error) {
	if token == "" {
		return "", time.Time{}, fmt.Errorf("%w: no token", ErrUnauthorized)
	}
	var claims jwt.RegisteredClaims
	if _, err := j.parser.ParseWithClaims(token, &claims, j.keyfunc); err != nil {
		return "", time.Time{}, fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	if claims.Subject == "" {
		return "", time.Time{}, fmt.Errorf("%w: the token has no sub", ErrUnauthorized)
	}
	return claims.Subject, claims.ExpiresAt.Time, nil
}
