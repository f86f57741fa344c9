package server

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/auth/authtest"
	"github.com/chatd/chatd/transport/wstest"
)

const testSecret = "0123456789abcdef0123456789abcdef"

// fakeResolver makes CHATD_ADDR's host names resolve as names says, and any other name
// not at all, for the rest of the test: what a host name means is the machine's, not
// the test's.
func fakeResolver(t *testing.T, names map[string][]string) {
	t.Helper()
	old := lookupIPAddr
	t.Cleanup(func() { lookupIPAddr = old })
	lookupIPAddr = func(ctx context.Context, host string) ([]net.IPAddr, error) {
		ips, ok := names[host]
		if !ok {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		var out []net.IPAddr
		for _, ip := range ips {
			out = append(out, net.IPAddr{IP: net.ParseIP(ip)})
		}
		return out, nil
	}
}

// testNames are the host names of the startup tests.
var testNames = map[string][]string{
	"localhost":        {"127.0.0.1", "::1"},
	"chat.example.com": {"203.0.113.7"},
	"mixed.example":    {"127.0.0.1", "192.168.1.5"},
	"loop.example":     {"127.0.1.1"},
}

// chatd refuses to start anonymous on a public address, and JWT without a key, naming the
// variables to set.
func TestAuthStartupRefusals(t *testing.T) {
	for name, tc := range map[string]struct {
		env     map[string]string
		args    []string
		names   map[string][]string // testNames if nil
		mention []string
	}{
		"none on every interface":     {env: map[string]string{"CHATD_ADDR": ":8080"}, mention: []string{"CHATD_ADDR", "CHATD_AUTH", "CHATD_AUTH_NONE_ON_PUBLIC=yes", "CHATD_JWT_SECRET"}},
		"none on 0.0.0.0":             {env: map[string]string{"CHATD_ADDR": "0.0.0.0:8080"}, mention: []string{"CHATD_AUTH_NONE_ON_PUBLIC"}},
		"none on [::]":                {args: []string{"-addr", "[::]:8080"}, mention: []string{"CHATD_AUTH_NONE_ON_PUBLIC"}},
		"none on a LAN address":       {env: map[string]string{"CHATD_ADDR": "192.168.1.5:8080"}, mention: []string{"CHATD_AUTH_NONE_ON_PUBLIC"}},
		"none on a host name":         {env: map[string]string{"CHATD_ADDR": "chat.example.com:8080"}, mention: []string{"CHATD_AUTH_NONE_ON_PUBLIC", "203.0.113.7"}},
		"none on a name also public":  {env: map[string]string{"CHATD_ADDR": "mixed.example:8080"}, mention: []string{"CHATD_AUTH_NONE_ON_PUBLIC", "192.168.1.5"}},
		"none on a name unresolved":   {env: map[string]string{"CHATD_ADDR": "nowhere.example:8080"}, mention: []string{"CHATD_AUTH_NONE_ON_PUBLIC", "does not resolve"}},
		"none on a public localhost":  {env: map[string]string{"CHATD_ADDR": "localhost:8080"}, names: map[string][]string{"localhost": {"127.0.0.1", "10.1.2.3"}}, mention: []string{"CHATD_ADDR", "10.1.2.3"}},
		"none with the override off":  {env: map[string]string{"CHATD_ADDR": "0.0.0.0:8080", "CHATD_AUTH_NONE_ON_PUBLIC": "no"}, mention: []string{"CHATD_AUTH_NONE_ON_PUBLIC"}},
		"jwt without a key":           {env: map[string]string{"CHATD_AUTH": "jwt"}, mention: []string{"CHATD_AUTH", "CHATD_JWT_SECRET", "CHATD_JWKS_URL"}},
		"jwt with both keys":          {env: map[string]string{"CHATD_AUTH": "jwt", "CHATD_JWT_SECRET": testSecret, "CHATD_JWKS_URL": "https://idp.example/jwks"}, mention: []string{"CHATD_JWT_SECRET", "CHATD_JWKS_URL"}},
		"jwt with a short secret":     {env: map[string]string{"CHATD_AUTH": "jwt", "CHATD_JWT_SECRET": "hunter2"}, mention: []string{"CHATD_JWT_SECRET", "32"}},
		"jwt with a bad JWKS URL":     {env: map[string]string{"CHATD_AUTH": "jwt", "CHATD_JWKS_URL": "idp.example/jwks", "CHATD_JWT_AUDIENCE": "chatd"}, mention: []string{"CHATD_JWKS_URL"}},
		"JWKS without an audience":    {env: map[string]string{"CHATD_AUTH": "jwt", "CHATD_JWKS_URL": "https://idp.example/jwks"}, mention: []string{"CHATD_JWKS_URL", "CHATD_JWT_AUDIENCE"}},
		"a JWT setting with none":     {env: map[string]string{"CHATD_JWT_SECRET": testSecret}, mention: []string{"CHATD_JWT_SECRET", "CHATD_AUTH=jwt"}},
		"an unknown mode":             {env: map[string]string{"CHATD_AUTH": "basic"}, mention: []string{"CHATD_AUTH", "basic", "none or jwt"}},
		"an override that is no word": {env: map[string]string{"CHATD_AUTH_NONE_ON_PUBLIC": "perhaps"}, mention: []string{"CHATD_AUTH_NONE_ON_PUBLIC"}},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.names == nil {
				tc.names = testNames
			}
			fakeResolver(t, tc.names)
			env := map[string]string{"DATABASE_URL": "postgres://db/chatd"}
			for k, v := range tc.env {
				env[k] = v
			}
			_, err := ConfigFromEnv(tc.args, envMap(env), &bytes.Buffer{})
			require.Error(t, err)
			for _, s := range tc.mention {
				require.Contains(t, err.Error(), s)
			}
			// run says so and exits 2, before it connects to anything.
			var stderr bytes.Buffer
			require.Equal(t, 2, Command(tc.args, envMap(env), &stderr))
			require.Contains(t, stderr.String(), tc.mention[0])
		})
	}
}

// What is allowed: none on loopback addresses, none on a public one with the override,
// jwt anywhere with a key.
func TestAuthStartupAccepted(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"none on 127.0.0.1":               {"CHATD_ADDR": "127.0.0.1:8080"},
		"none on 127.3.4.5":               {"CHATD_ADDR": "127.3.4.5:8080"},
		"none on ::1":                     {"CHATD_ADDR": "[::1]:8080"},
		"none on localhost":               {"CHATD_ADDR": "localhost:8080"},
		"none on a name of loopback":      {"CHATD_ADDR": "loop.example:8080"},
		"none on public with override":    {"CHATD_ADDR": "0.0.0.0:8080", "CHATD_AUTH_NONE_ON_PUBLIC": "yes"},
		"jwt with a secret on public":     {"CHATD_ADDR": "0.0.0.0:8080", "CHATD_AUTH": "jwt", "CHATD_JWT_SECRET": testSecret},
		"jwt with a JWKS URL on public":   {"CHATD_ADDR": ":8080", "CHATD_AUTH": "jwt", "CHATD_JWKS_URL": "https://idp.example/.well-known/jwks.json", "CHATD_JWT_ISSUER": "https://idp.example", "CHATD_JWT_AUDIENCE": "chatd"},
		"none on public with override=on": {"CHATD_ADDR": "[::]:8080", "CHATD_AUTH_NONE_ON_PUBLIC": "on"},
	} {
		t.Run(name, func(t *testing.T) {
			fakeResolver(t, testNames)
			env["DATABASE_URL"] = "postgres://db/chatd"
			_, err := ConfigFromEnv(nil, envMap(env), &bytes.Buffer{})
			require.NoError(t, err)
		})
	}
}

// A JWT-protected chatd, wired as main wires it: the WebSocket and the API refuse a
// missing or bad token and let a good one in.
func TestAuthJWTInProcess(t *testing.T) {
	m, _ := startInProcess(t, map[string]string{"CHATD_AUTH": "jwt", "CHATD_JWT_SECRET": testSecret, "CHATD_JWT_AUDIENCE": "chatd"})
	good := authtest.HS256(t, []byte(testSecret), authtest.Claims{Subject: "alice", Audience: "chatd", ExpiresAt: time.Now().Add(time.Hour)})
	wrongAud := authtest.HS256(t, []byte(testSecret), authtest.Claims{Subject: "alice", Audience: "other", ExpiresAt: time.Now().Add(time.Hour)})
	wsURL := "ws://" + m.Addr() + "/v1/ws"

	for _, token := range []string{"", wrongAud} {
		c := wstest.Dial(t, wsURL, nil)
		h := map[string]any{"type": "hello"}
		if token != "" {
			h["token"] = token
		}
		c.Send(h)
		f := c.Read()
		require.Equal(t, "unauthorized", f.Code, "%s", f.Raw)
		require.Equal(t, websocket.StatusCode(4001), c.ExpectClose())
	}
	c := wstest.Dial(t, wsURL, nil)
	c.Token = good
	require.Equal(t, "snapshot", c.Hello("").Type)

	get := func(token string) int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+m.Addr()+"/v1/sessions", nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, get(""))
	require.Equal(t, http.StatusUnauthorized, get(wrongAud))
	require.Equal(t, http.StatusOK, get(good))
}

// localhost, resolved by the machine's own resolver (/etc/hosts), is loopback here.
func TestLocalhostResolvesToLoopback(t *testing.T) {
	require.Equal(t, "", notLoopback("localhost:8080"))
}
