package server

import (
	"context"
	"net/http"
	"time"

	"github.com/chatd/chatd/auth"
	"github.com/chatd/chatd/transport"
)

// newAuthenticator returns how the WebSocket and the HTTP API know users
// (CHATD_AUTH), and the service that runs it (nil when there is nothing to run).
func (m *Server) newAuthenticator() (transport.Authenticator, *jwtService) {
	if m.cfg.Auth != AuthJWT {
		return transport.Anonymous{}, nil
	}
	s := &jwtService{cfg: auth.Config{
		Secret:   []byte(m.cfg.JWTSecret),
		JWKSURL:  m.cfg.JWKSURL,
		Issuer:   m.cfg.JWTIssuer,
		Audience: m.cfg.JWTAudience,
		// A few seconds of clock skew between chatd and the identity provider.
		Leeway: 5 * time.Second,
		Logger: m.log.With().Str("component", "auth").Logger(),
	}}
	return s, s
}

// jwtService is the JWT verifier as a service: with a JWK Set, starting it fetches the
// set and starts its background refresh, which stopping ends. Requests come only once
// the listener, started after it, serves them.
type jwtService struct {
	cfg auth.Config
	jwt *auth.JWT
}

var _ transport.ExpiringAuthenticator = (*jwtService)(nil)

func (s *jwtService) Start(context.Context) error {
	j, err := auth.New(s.cfg)
	if err != nil {
		return err
	}
	s.jwt = j
	if s.cfg.JWKSURL != "" {
		s.cfg.Logger.Info().Str("jwks_url", s.cfg.JWKSURL).Msg("verifying JWTs with the identity provider's keys")
	} else {
		s.cfg.Logger.Info().Msg("verifying JWTs with CHATD_JWT_SECRET")
	}
	return nil
}

func (s *jwtService) Stop(context.Context) error {
	if s.jwt != nil {
		s.jwt.Close()
	}
	return nil
}

func (s *jwtService) Authenticate(ctx context.Context, r *http.Request, token string) (string, error) {
	return s.jwt.Authenticate(ctx, r, token)
}

func (s *jwtService) AuthenticateExpiry(ctx context.Context, r *http.Request, token string) (string, time.Time, error) {
	return s.jwt.AuthenticateExpiry(ctx, r, token)
}
