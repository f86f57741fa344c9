package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/time/rate"

	"github.com/chatd/chatd/agent/demo"
	"github.com/chatd/chatd/agent/sandbox"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport/wstest"
)

// childEnv, when "1", makes the test binary run chatd itself instead of the tests, so a
// test can start chatd as a real process: exec.Command(os.Args[0], chatd flags...).
const childEnv = "CHATD_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(Command(os.Args[1:], os.Getenv, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

// ---------------------------------------------------------------------------------------
// Configuration

// envMap is a getenv backed by a map.
func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseConfigDefaults(t *testing.T) {
	var usage bytes.Buffer
	cfg, err := ConfigFromEnv(nil, envMap(map[string]string{"DATABASE_URL": "postgres://db/chatd"}), &usage)
	require.NoError(t, err)
	require.Equal(t, Config{
		Addr:            "127.0.0.1:8080",
		AdminAddr:       "127.0.0.1:9090",
		DatabaseURL:     "postgres://db/chatd",
		LogLevel:        "info",
		LogFormat:       "auto",
		RingEvents:      4096,
		RingBytes:       4 << 20,
		SendQueueBytes:  1 << 20,
		ReadLimit:       256 << 10,
		MaxContentBytes: 128 << 10,
		IdleEvict:       5 * time.Minute,
		ShutdownTimeout: 10 * time.Second,
		StreamSync:      50 * time.Millisecond,
		Pprof:           false,
		CoalesceDeltas:  defaultCoalesceDeltas,
		DemoWords:       60,
		DemoDelay:       30 * time.Millisecond,

		PingInterval:      25 * time.Second,
		PingTimeout:       10 * time.Second,
		MaxQueuedCommands: 16,
		CommandRate:       20,
		CommandBurst:      40,
		MaxConnsPerUser:   64,
		MaxConnsPerAddr:   256,
		MaxRunsPerUser:    8,
		DoubleText:        "queue",
		HandshakeRate:     20,
		HandshakeBurst:    100,

		MaxConns:           defaultMaxConns(),
		MaxSessionsPerUser: 10000,
		HTTPReadTimeout:    time.Minute,
		HTTPWriteTimeout:   time.Minute,
		HTTPIdleTimeout:    time.Minute,

		ApprovalTimeout:  5 * time.Minute,
		SandboxIdlePause: 15 * time.Minute,
		SandboxKillAfter: 24 * time.Hour,
		AbandonAfter:     30 * time.Minute,
		LeaseTTL:         10 * time.Second,
		Recover:          RecoverContinue,
		MaxSteps:         20,
		ShellTool:        false,
		SandboxDir:       defaultSandboxDir(envMap(nil), os.Geteuid()),
		SandboxCPUTime:   10 * time.Minute,
		SandboxMemory:    4 << 30,
		SandboxProcesses: 256,
		SandboxFileSize:  1 << 30,
		SandboxTmpSize:   256 << 20,

		SandboxTotalMemory: 2 << 30,
		SandboxOpenFiles:   1024,
		SandboxDisk:        2 << 30,

		WorkspaceRetention: 7 * 24 * time.Hour,
		RetainDone:         7 * 24 * time.Hour,
		RetainFailed:       30 * 24 * time.Hour,
		RetainToolOutput:   4096,
		RetentionInterval:  10 * time.Minute,
		ToolStale:          time.Minute,
		QuietRelease:       time.Minute,

		Agent:         "demo",
		ContextTokens: 64000,
		ModelTimeout:  5 * time.Minute,

		Auth: "none",
	}, cfg)
	require.Empty(t, usage.String(), "nothing is printed for a good configuration")
}

func TestParseConfigValues(t *testing.T) {
	allEnv := map[string]string{
		"CHATD_ADDR":              "0.0.0.0:9000",
		"CHATD_ADMIN_ADDR":        "10.0.0.1:9091",
		"DATABASE_URL":            "postgres://env/chatd",
		"CHATD_ALLOWED_ORIGINS":   "a.example, https://b.example",
		"CHATD_LOG_LEVEL":         "debug",
		"CHATD_LOG_FORMAT":        "json",
		"CHATD_RING_EVENTS":       "100",
		"CHATD_RING_BYTES":        "2MiB",
		"CHATD_SEND_QUEUE_BYTES":  "512KiB",
		"CHATD_READ_LIMIT":        "64k",
		"CHATD_MAX_CONTENT_BYTES": "1000",
		"CHATD_IDLE_EVICT":        "90s",
		"CHATD_SHUTDOWN_TIMEOUT":  "3s",
		"CHATD_STREAM_SYNC":       "off",
		"CHATD_PPROF":             "on",
		"CHATD_COALESCE_DELTAS":   "25ms",
		"CHATD_DEMO_WORDS":        "7",
		"CHATD_DEMO_DELAY":        "0s",

		"CHATD_PING_INTERVAL":       "30s",
		"CHATD_PING_TIMEOUT":        "40s",
		"CHATD_MAX_QUEUED_COMMANDS": "4",
		"CHATD_COMMAND_RATE":        "600/m",
		"CHATD_COMMAND_BURST":       "5",
		"CHATD_MAX_CONNS_PER_USER":  "0",
		"CHATD_MAX_RUNS_PER_USER":   "2",
		"CHATD_MAX_CONNS_PER_ADDR":  "8",
		"CHATD_HANDSHAKE_RATE":      "off",
		"CHATD_HANDSHAKE_BURST":     "3",

		"CHATD_MAX_CONNS":             "900",
		"CHATD_MAX_SESSIONS_PER_USER": "50",
		"CHATD_HTTP_READ_TIMEOUT":     "20s",
		"CHATD_HTTP_WRITE_TIMEOUT":    "25s",
		"CHATD_HTTP_IDLE_TIMEOUT":     "2m",

		"CHATD_APPROVAL_TIMEOUT":   "10s",
		"CHATD_APPROVAL_EXPIRE":    "30m",
		"CHATD_SANDBOX_KILL_AFTER": "1h",
		"CHATD_SANDBOX_IDLE_PAUSE": "20m",
		"CHATD_ABANDON_AFTER":      "2m",
		"CHATD_LEASE_TTL":          "3s",
		"CHATD_NODE_ADDR":          "10.0.0.7:8080",
		"CHATD_NODE_ID":            "node-7",
		"CHATD_MAX_STEPS":          "5",
		"CHATD_SHELL_TOOL":         "on",
		"CHATD_SANDBOX_DIR":        "/srv/sandboxes",
		"CHATD_SANDBOX":            "bwrap",
		"CHATD_BWRAP":              "/opt/bwrap",
		"CHATD_SANDBOX_NETWORK":    "on",
		"CHATD_SANDBOX_CPU_TIME":   "30s",
		"CHATD_SANDBOX_MEMORY":     "8GiB",
		"CHATD_SANDBOX_PROCESSES":  "64",
		"CHATD_SANDBOX_FILE_SIZE":  "10MiB",
		"CHATD_SANDBOX_TMP_SIZE":   "1MiB",

		"CHATD_SANDBOX_TOTAL_MEMORY": "16GiB",
		"CHATD_SANDBOX_OPEN_FILES":   "128",
		"CHATD_SANDBOX_DISK":         "100GiB",

		"CHATD_WORKSPACE_RETENTION": "30d",
		"CHATD_RETAIN_DONE":         "3d",
		"CHATD_RETAIN_FAILED":       "60d",
		"CHATD_RETAIN_TOOL_OUTPUT":  "100",
		"CHATD_RETAIN_SESSIONS":     "365d",
		"CHATD_RETENTION_INTERVAL":  "1h",
		"CHATD_TOOL_STALE":          "2m",
		"CHATD_WEBHOOK_URL":         "https://hooks.example/chatd",
		"CHATD_WEBHOOK_SECRET":      "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",

		"CHATD_AGENT":           "anthropic",
		"CHATD_MODEL":           "claude-test",
		"OPENAI_BASE_URL":       "http://localhost:11434/v1",
		"OPENAI_API_KEY":        "sk-openai",
		"ANTHROPIC_BASE_URL":    "https://proxy.example/anthropic",
		"ANTHROPIC_API_KEY":     "sk-ant",
		"CHATD_SYSTEM_PROMPT":   "Be brief.",
		"CHATD_CONTEXT_TOKENS":  "32000",
		"CHATD_MAX_TOKENS":      "2048",
		"CHATD_THINKING_BUDGET": "1024",
		"CHATD_MODEL_TIMEOUT":   "90s",
		"CHATD_DOUBLE_TEXT":     "interrupt",

		"CHATD_AUTH":         "jwt",
		"CHATD_JWT_SECRET":   "0123456789abcdef0123456789abcdef",
		"CHATD_JWT_ISSUER":   "https://idp.example",
		"CHATD_JWT_AUDIENCE": "chatd-env",
	}
	fromEnv := Config{
		Addr:            "0.0.0.0:9000",
		AdminAddr:       "10.0.0.1:9091",
		DatabaseURL:     "postgres://env/chatd",
		AllowedOrigins:  []string{"a.example", "https://b.example"},
		LogLevel:        "debug",
		LogFormat:       "json",
		RingEvents:      100,
		RingBytes:       2 << 20,
		SendQueueBytes:  512 << 10,
		ReadLimit:       64 << 10,
		MaxContentBytes: 1000,
		IdleEvict:       90 * time.Second,
		ShutdownTimeout: 3 * time.Second,
		StreamSync:      0,
		Pprof:           true,
		CoalesceDeltas:  25 * time.Millisecond,
		DemoWords:       7,
		DemoDelay:       0,

		PingInterval:      30 * time.Second,
		PingTimeout:       40 * time.Second,
		MaxQueuedCommands: 4,
		CommandRate:       10,
		CommandBurst:      5,
		MaxConnsPerUser:   0,
		MaxConnsPerAddr:   8,
		MaxRunsPerUser:    2,
		DoubleText:        "interrupt",
		HandshakeRate:     rate.Inf,
		HandshakeBurst:    3,

		MaxConns:           900,
		MaxSessionsPerUser: 50,
		HTTPReadTimeout:    20 * time.Second,
		HTTPWriteTimeout:   25 * time.Second,
		HTTPIdleTimeout:    2 * time.Minute,

		ApprovalTimeout:  10 * time.Second,
		ApprovalExpire:   30 * time.Minute,
		SandboxIdlePause: 20 * time.Minute,
		SandboxKillAfter: time.Hour,
		AbandonAfter:     2 * time.Minute,
		LeaseTTL:         3 * time.Second,
		NodeAddr:         "10.0.0.7:8080",
		NodeID:           "node-7",
		Recover:          RecoverContinue,
		MaxSteps:         5,
		ShellTool:        true,
		SandboxDir:       "/srv/sandboxes",
		Sandbox:          "bwrap",
		Bwrap:            "/opt/bwrap",
		SandboxNetwork:   true,
		SandboxCPUTime:   30 * time.Second,
		SandboxMemory:    8 << 30,
		SandboxProcesses: 64,
		SandboxFileSize:  10 << 20,
		SandboxTmpSize:   1 << 20,

		SandboxTotalMemory: 16 << 30,
		SandboxOpenFiles:   128,
		SandboxDisk:        100 << 30,

		WorkspaceRetention: 30 * 24 * time.Hour,
		RetainDone:         3 * 24 * time.Hour,
		RetainFailed:       60 * 24 * time.Hour,
		RetainToolOutput:   100,
		RetainSessions:     365 * 24 * time.Hour,
		RetentionInterval:  time.Hour,
		ToolStale:          2 * time.Minute,
		WebhookURL:         "https://hooks.example/chatd",
		WebhookSecret:      "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		QuietRelease:       time.Minute,

		Agent:            "anthropic",
		Model:            "claude-test",
		OpenAIBaseURL:    "http://localhost:11434/v1",
		OpenAIAPIKey:     "sk-openai",
		AnthropicBaseURL: "https://proxy.example/anthropic",
		AnthropicAPIKey:  "sk-ant",
		SystemPrompt:     "Be brief.",
		ContextTokens:    32000,
		MaxTokens:        2048,
		ThinkingBudget:   1024,
		ModelTimeout:     90 * time.Second,

		Auth:        "jwt",
		JWTSecret:   "0123456789abcdef0123456789abcdef",
		JWTIssuer:   "https://idp.example",
		JWTAudience: "chatd-env",
	}

	tests := []struct {
		name string
		args []string
		env  map[string]string
		want func(*Config)
	}{
		{name: "env values are used", env: allEnv},
		{
			name: "flags beat env vars",
			env:  allEnv,
			args: []string{
				"-addr", "127.0.0.1:7000",
				"-admin-addr", "127.0.0.1:7001",
				"-database-url", "postgres://flag/chatd",
				"-allowed-origins", "c.example",
				"-log-level", "warn",
				"-log-format", "console",
				"-ring-events", "50",
				"-ring-bytes", "64KiB",
				"-send-queue-bytes", "4096",
				"-read-limit", "1m",
				"-max-content-bytes", "2KiB",
				"-idle-evict", "1h",
				"-ping-interval", "5s",
				"-ping-timeout", "2s",
				"-max-queued-commands", "32",
				"-command-rate", "0.5",
				"-command-burst", "2",
				"-max-conns-per-user", "3",
				"-max-conns-per-addr", "0",
				"-max-runs-per-user", "0",
				"-double-text", "reject",
				"-handshake-rate", "7200/h",
				"-handshake-burst", "9",
				"-shutdown-timeout", "20s",
				"-stream-sync", "200ms",
				"-pprof=off",
				"-coalesce-deltas", "1s",
				"-demo-words", "9",
				"-demo-delay", "5ms",
				"-approval-timeout", "1m", "-approval-expire", "1h",
				"-sandbox-kill-after", "2h",
				"-sandbox-idle-pause", "30m",
				"-workspace-retention", "off",
				"-retain-done", "1d", "-retain-failed", "off", "-retain-tool-output", "10",
				"-retain-sessions", "off", "-retention-interval", "5m", "-tool-stale", "off",
				"-webhook-url", "http://127.0.0.1:9/hook",
				"-abandon-after", "3m",
				"-lease-ttl", "1s",
				"-node-addr", "node-b:8080",
				"-node-id", "b",
				"-max-steps", "4",
				"-shell-tool=off",
				"-sandbox-dir", "/tmp/sb",
				"-sandbox", "local",
				"-bwrap", "/usr/bin/bwrap",
				"-sandbox-network=off",
				"-max-conns", "0",
				"-max-sessions-per-user", "0",
				"-http-read-timeout", "5s",
				"-http-write-timeout", "6s",
				"-http-idle-timeout", "7s",
				"-sandbox-cpu-time", "0s",
				"-sandbox-memory", "0",
				"-sandbox-processes", "0",
				"-sandbox-file-size", "2GiB",
				"-sandbox-tmp-size", "16MiB",
				"-sandbox-total-memory", "0",
				"-sandbox-open-files", "0",
				"-sandbox-disk", "0",
				"-agent", "openai",
				"-model", "gpt-test",
				"-openai-base-url", "http://127.0.0.1:9/v1",
				"-anthropic-base-url", "http://127.0.0.1:10",
				"-system-prompt", "Be kind.",
				"-context-tokens", "8000",
				"-max-tokens", "100",
				"-thinking-budget", "0",
				"-model-timeout", "1m",
				"-jwt-issuer", "https://idp.flag",
				"-jwt-audience", "chatd-flag",
			},
			want: func(c *Config) {
				*c = Config{
					Addr:            "127.0.0.1:7000",
					AdminAddr:       "127.0.0.1:7001",
					DatabaseURL:     "postgres://flag/chatd",
					AllowedOrigins:  []string{"c.example"},
					LogLevel:        "warn",
					LogFormat:       "console",
					RingEvents:      50,
					RingBytes:       64 << 10,
					SendQueueBytes:  4096,
					ReadLimit:       1 << 20,
					MaxContentBytes: 2 << 10,
					IdleEvict:       time.Hour,
					ShutdownTimeout: 20 * time.Second,
					StreamSync:      200 * time.Millisecond,
					Pprof:           false,
					CoalesceDeltas:  time.Second,
					DemoWords:       9,
					DemoDelay:       5 * time.Millisecond,

					PingInterval:      5 * time.Second,
					PingTimeout:       2 * time.Second,
					MaxQueuedCommands: 32,
					CommandRate:       0.5,
					CommandBurst:      2,
					MaxConnsPerUser:   3,
					MaxConnsPerAddr:   0,
					DoubleText:        "reject",
					HandshakeRate:     2,
					HandshakeBurst:    9,

					HTTPReadTimeout:  5 * time.Second,
					HTTPWriteTimeout: 6 * time.Second,
					HTTPIdleTimeout:  7 * time.Second,

					ApprovalTimeout:  time.Minute,
					ApprovalExpire:   time.Hour,
					SandboxIdlePause: 30 * time.Minute,
					SandboxKillAfter: 2 * time.Hour,
					AbandonAfter:     3 * time.Minute,
					LeaseTTL:         time.Second,
					NodeAddr:         "node-b:8080",
					NodeID:           "b",
					Recover:          RecoverContinue,
					MaxSteps:         4,
					ShellTool:        false,
					SandboxDir:       "/tmp/sb",
					Sandbox:          "local",
					Bwrap:            "/usr/bin/bwrap",
					SandboxFileSize:  2 << 30,
					SandboxTmpSize:   16 << 20,

					WorkspaceRetention: 0, // off
					RetainDone:         24 * time.Hour,
					RetainToolOutput:   10,
					RetentionInterval:  5 * time.Minute,
					WebhookURL:         "http://127.0.0.1:9/hook",
					WebhookSecret:      "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", // the secret has no flag in the test
					QuietRelease:       time.Minute,

					Agent:            "openai",
					Model:            "gpt-test",
					OpenAIBaseURL:    "http://127.0.0.1:9/v1",
					OpenAIAPIKey:     "sk-openai", // keys have no flag
					AnthropicBaseURL: "http://127.0.0.1:10",
					AnthropicAPIKey:  "sk-ant",
					SystemPrompt:     "Be kind.",
					ContextTokens:    8000,
					MaxTokens:        100,
					ModelTimeout:     time.Minute,

					Auth:        "jwt",
					JWTSecret:   "0123456789abcdef0123456789abcdef", // the secret has no flag
					JWTIssuer:   "https://idp.flag",
					JWTAudience: "chatd-flag",
				}
			},
		},
		{
			name: "one flag beats its env var, the others still come from the env",
			env:  allEnv,
			args: []string{"-addr=127.0.0.1:7001", "-ring-bytes=8MiB"},
			want: func(c *Config) { c.Addr, c.RingBytes = "127.0.0.1:7001", 8<<20 },
		},
		{
			name: "flags without env vars",
			env:  map[string]string{},
			args: []string{"-database-url", "postgres://flag/only", "-demo-words", "3"},
			want: func(c *Config) {
				*c = Config{
					Addr: "127.0.0.1:8080", AdminAddr: "127.0.0.1:9090", DatabaseURL: "postgres://flag/only", LogLevel: "info", LogFormat: "auto",
					RingEvents: 4096, RingBytes: 4 << 20, SendQueueBytes: 1 << 20, ReadLimit: 256 << 10,
					MaxContentBytes: 128 << 10, IdleEvict: 5 * time.Minute, ShutdownTimeout: 10 * time.Second, StreamSync: 50 * time.Millisecond,
					PingInterval: 25 * time.Second, PingTimeout: 10 * time.Second, MaxQueuedCommands: 16,
					CommandRate: 20, CommandBurst: 40, MaxConnsPerUser: 64, MaxConnsPerAddr: 256, MaxRunsPerUser: 8, DoubleText: "queue", HandshakeRate: 20, HandshakeBurst: 100,
					MaxConns: defaultMaxConns(), MaxSessionsPerUser: 10000, HTTPReadTimeout: time.Minute, HTTPWriteTimeout: time.Minute, HTTPIdleTimeout: time.Minute,
					DemoWords: 3, DemoDelay: 30 * time.Millisecond, CoalesceDeltas: defaultCoalesceDeltas,
					ApprovalTimeout: 5 * time.Minute, SandboxIdlePause: 15 * time.Minute, SandboxKillAfter: 24 * time.Hour, AbandonAfter: 30 * time.Minute, LeaseTTL: 10 * time.Second, Recover: RecoverContinue,
					MaxSteps: 20, SandboxDir: defaultSandboxDir(envMap(nil), os.Geteuid()),
					SandboxCPUTime: 10 * time.Minute, SandboxMemory: 4 << 30, SandboxProcesses: 256,
					SandboxFileSize: 1 << 30, SandboxTmpSize: 256 << 20, WorkspaceRetention: 7 * 24 * time.Hour,
					RetainDone: 7 * 24 * time.Hour, RetainFailed: 30 * 24 * time.Hour, RetainToolOutput: 4096, RetentionInterval: 10 * time.Minute, ToolStale: time.Minute, QuietRelease: time.Minute,
					SandboxTotalMemory: 2 << 30, SandboxOpenFiles: 1024, SandboxDisk: 2 << 30,
					Agent: "demo", ContextTokens: 64000, ModelTimeout: 5 * time.Minute,
					Auth: "none",
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := fromEnv
			want.AllowedOrigins = append([]string(nil), fromEnv.AllowedOrigins...)
			if tc.want != nil {
				tc.want(&want)
			}
			var usage bytes.Buffer
			got, err := ConfigFromEnv(tc.args, envMap(tc.env), &usage)
			require.NoError(t, err, "usage output: %s", usage.String())
			require.Equal(t, want, got)
		})
	}
}

func TestParseConfigByteSizes(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"65536", 65536},
		{"64KiB", 64 << 10},
		{"64kib", 64 << 10},
		{"64K", 64 << 10},
		{"4MiB", 4 << 20},
		{"4m", 4 << 20},
		{"4MB", 4 << 20},
		{"1GiB", 1 << 30},
		{" 2048 ", 2048},
	}
	for _, tc := range tests {
		t.Run(strings.TrimSpace(tc.in), func(t *testing.T) {
			env := map[string]string{
				"DATABASE_URL":           "postgres://db/chatd",
				"CHATD_RING_BYTES":       tc.in,
				"CHATD_SEND_QUEUE_BYTES": tc.in,
				"CHATD_READ_LIMIT":       tc.in,
			}
			cfg, err := ConfigFromEnv(nil, envMap(env), &bytes.Buffer{})
			require.NoError(t, err)
			require.Equal(t, tc.want, cfg.RingBytes, "CHATD_RING_BYTES=%q", tc.in)
			require.Equal(t, tc.want, cfg.SendQueueBytes, "CHATD_SEND_QUEUE_BYTES=%q", tc.in)
			require.Equal(t, tc.want, cfg.ReadLimit, "CHATD_READ_LIMIT=%q", tc.in)

			cfg, err = ConfigFromEnv([]string{"-ring-bytes", tc.in, "-read-limit", tc.in},
				envMap(map[string]string{"DATABASE_URL": "postgres://db/chatd"}), &bytes.Buffer{})
			require.NoError(t, err)
			require.Equal(t, tc.want, cfg.RingBytes, "-ring-bytes %q", tc.in)
			require.Equal(t, tc.want, cfg.ReadLimit, "-read-limit %q", tc.in)
		})
	}
}

// CHATD_WORKSPACE_RETENTION takes durations, whole days, and 0 or off for keeping
// workspaces for good; -help shows whole days as days.
func TestParseConfigWorkspaceRetention(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"7d", 7 * 24 * time.Hour},
		{" 30D ", 30 * 24 * time.Hour},
		{"0d", 0},
		{"12h", 12 * time.Hour},
		{"90m", 90 * time.Minute},
		{"1s", time.Second},
		{"0", 0},
		{"off", 0},
		{"OFF", 0},
	}
	for _, tc := range tests {
		t.Run(strings.TrimSpace(tc.in), func(t *testing.T) {
			cfg, err := ConfigFromEnv(nil, envMap(map[string]string{"DATABASE_URL": "postgres://db/chatd", "CHATD_WORKSPACE_RETENTION": tc.in}), &bytes.Buffer{})
			require.NoError(t, err)
			require.Equal(t, tc.want, cfg.WorkspaceRetention, "CHATD_WORKSPACE_RETENTION=%q", tc.in)
			cfg, err = ConfigFromEnv([]string{"-workspace-retention", tc.in}, envMap(map[string]string{"DATABASE_URL": "postgres://db/chatd"}), &bytes.Buffer{})
			require.NoError(t, err)
			require.Equal(t, tc.want, cfg.WorkspaceRetention, "-workspace-retention %q", tc.in)
		})
	}
	var usage bytes.Buffer
	_, err := ConfigFromEnv([]string{"-help"}, envMap(map[string]string{"DATABASE_URL": "postgres://db/chatd"}), &usage)
	require.Error(t, err)
	require.Contains(t, usage.String(), "(default 7d)")
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		args []string
		noDB bool
		// mention must all appear in the error.
		mention []string
	}{
		{name: "missing DATABASE_URL", noDB: true, mention: []string{"DATABASE_URL"}},
		{name: "ring events not a number", env: map[string]string{"CHATD_RING_EVENTS": "abc"}, mention: []string{"CHATD_RING_EVENTS", "abc"}},
		{name: "ring events zero", env: map[string]string{"CHATD_RING_EVENTS": "0"}, mention: []string{"CHATD_RING_EVENTS"}},
		{name: "negative max conns", env: map[string]string{"CHATD_MAX_CONNS": "-1"}, mention: []string{"CHATD_MAX_CONNS"}},
		{name: "negative max sessions", env: map[string]string{"CHATD_MAX_SESSIONS_PER_USER": "-1"}, mention: []string{"CHATD_MAX_SESSIONS_PER_USER"}},
		{name: "zero read timeout", env: map[string]string{"CHATD_HTTP_READ_TIMEOUT": "0s"}, mention: []string{"CHATD_HTTP_READ_TIMEOUT"}},
		{name: "negative write timeout", env: map[string]string{"CHATD_HTTP_WRITE_TIMEOUT": "-1s"}, mention: []string{"CHATD_HTTP_WRITE_TIMEOUT"}},
		{name: "idle timeout not a duration", env: map[string]string{"CHATD_HTTP_IDLE_TIMEOUT": "long"}, mention: []string{"CHATD_HTTP_IDLE_TIMEOUT", "long"}},
		{name: "negative idle evict", env: map[string]string{"CHATD_IDLE_EVICT": "-1s"}, mention: []string{"CHATD_IDLE_EVICT"}},
		{name: "idle evict not a duration", env: map[string]string{"CHATD_IDLE_EVICT": "soon"}, mention: []string{"CHATD_IDLE_EVICT", "soon"}},
		{name: "log format xml", env: map[string]string{"CHATD_LOG_FORMAT": "xml"}, mention: []string{"CHATD_LOG_FORMAT", "xml"}},
		{name: "ring bytes not a size", env: map[string]string{"CHATD_RING_BYTES": "lots"}, mention: []string{"CHATD_RING_BYTES", "lots"}},
		{name: "ring bytes negative", env: map[string]string{"CHATD_RING_BYTES": "-5"}, mention: []string{"CHATD_RING_BYTES"}},
		{name: "ring bytes too small", env: map[string]string{"CHATD_RING_BYTES": "100"}, mention: []string{"CHATD_RING_BYTES"}},
		{name: "send queue too small", env: map[string]string{"CHATD_SEND_QUEUE_BYTES": "1000"}, mention: []string{"CHATD_SEND_QUEUE_BYTES"}},
		{name: "read limit not a size", env: map[string]string{"CHATD_READ_LIMIT": "4 megs"}, mention: []string{"CHATD_READ_LIMIT"}},
		{name: "max content zero", env: map[string]string{"CHATD_MAX_CONTENT_BYTES": "0"}, mention: []string{"CHATD_MAX_CONTENT_BYTES"}},
		{name: "shutdown timeout zero", env: map[string]string{"CHATD_SHUTDOWN_TIMEOUT": "0s"}, mention: []string{"CHATD_SHUTDOWN_TIMEOUT"}},
		{name: "stream sync not a duration", env: map[string]string{"CHATD_STREAM_SYNC": "sometimes"}, mention: []string{"CHATD_STREAM_SYNC"}},
		{name: "stream sync too long", env: map[string]string{"CHATD_STREAM_SYNC": "1m"}, mention: []string{"CHATD_STREAM_SYNC"}},
		{name: "ping interval zero", env: map[string]string{"CHATD_PING_INTERVAL": "0s"}, mention: []string{"CHATD_PING_INTERVAL", "-ping-interval"}},
		{name: "ping interval not a duration", env: map[string]string{"CHATD_PING_INTERVAL": "often"}, mention: []string{"CHATD_PING_INTERVAL", "often"}},
		{name: "ping timeout negative", env: map[string]string{"CHATD_PING_TIMEOUT": "-1s"}, mention: []string{"CHATD_PING_TIMEOUT", "-ping-timeout"}},
		{name: "ping timeout flag zero", args: []string{"-ping-timeout", "0s"}, mention: []string{"CHATD_PING_TIMEOUT"}},
		{name: "max queued commands zero", env: map[string]string{"CHATD_MAX_QUEUED_COMMANDS": "0"}, mention: []string{"CHATD_MAX_QUEUED_COMMANDS", "-max-queued-commands"}},
		{name: "command rate not a rate", env: map[string]string{"CHATD_COMMAND_RATE": "fast"}, mention: []string{"CHATD_COMMAND_RATE", "fast", "20/s"}},
		{name: "command rate unit", env: map[string]string{"CHATD_COMMAND_RATE": "20/day"}, mention: []string{"CHATD_COMMAND_RATE", "20/day"}},
		{name: "command rate zero", env: map[string]string{"CHATD_COMMAND_RATE": "0/s"}, mention: []string{"CHATD_COMMAND_RATE", "positive"}},
		{name: "command rate flag negative", args: []string{"-command-rate", "-3"}, mention: []string{"command-rate", "positive"}},
		{name: "command burst zero", env: map[string]string{"CHATD_COMMAND_BURST": "0"}, mention: []string{"CHATD_COMMAND_BURST", "-command-burst"}},
		{name: "handshake rate not a rate", env: map[string]string{"CHATD_HANDSHAKE_RATE": "NaN"}, mention: []string{"CHATD_HANDSHAKE_RATE", "NaN"}},
		{name: "handshake burst not a number", env: map[string]string{"CHATD_HANDSHAKE_BURST": "many"}, mention: []string{"CHATD_HANDSHAKE_BURST", "many"}},
		{name: "max conns per user negative", env: map[string]string{"CHATD_MAX_CONNS_PER_USER": "-1"}, mention: []string{"CHATD_MAX_CONNS_PER_USER", "-max-conns-per-user"}},
		{name: "max runs per user negative", env: map[string]string{"CHATD_MAX_RUNS_PER_USER": "-1"}, mention: []string{"CHATD_MAX_RUNS_PER_USER", "-max-runs-per-user"}},
		{name: "max conns per addr not a number", env: map[string]string{"CHATD_MAX_CONNS_PER_ADDR": "lots"}, mention: []string{"CHATD_MAX_CONNS_PER_ADDR", "lots"}},
		{name: "max conns per addr negative flag", args: []string{"-max-conns-per-addr", "-2"}, mention: []string{"CHATD_MAX_CONNS_PER_ADDR"}},
		{name: "max queued commands not a number", env: map[string]string{"CHATD_MAX_QUEUED_COMMANDS": "lots"}, mention: []string{"CHATD_MAX_QUEUED_COMMANDS", "lots"}},
		{name: "coalesce deltas negative", env: map[string]string{"CHATD_COALESCE_DELTAS": "-1ms"}, mention: []string{"CHATD_COALESCE_DELTAS", "-1ms"}},
		{name: "coalesce deltas above 1s", env: map[string]string{"CHATD_COALESCE_DELTAS": "1001ms"}, mention: []string{"CHATD_COALESCE_DELTAS", "1.001s"}},
		{name: "coalesce deltas not a duration", env: map[string]string{"CHATD_COALESCE_DELTAS": "25"}, mention: []string{"CHATD_COALESCE_DELTAS", "25"}},
		{name: "coalesce deltas flag above 1s", args: []string{"-coalesce-deltas", "2s"}, mention: []string{"CHATD_COALESCE_DELTAS", "-coalesce-deltas"}},
		{name: "demo words not a number", env: map[string]string{"CHATD_DEMO_WORDS": "many"}, mention: []string{"CHATD_DEMO_WORDS"}},
		{name: "demo words zero", env: map[string]string{"CHATD_DEMO_WORDS": "0"}, mention: []string{"CHATD_DEMO_WORDS"}},
		{name: "demo delay negative", env: map[string]string{"CHATD_DEMO_DELAY": "-1ms"}, mention: []string{"CHATD_DEMO_DELAY"}},
		{name: "approval timeout zero", env: map[string]string{"CHATD_APPROVAL_TIMEOUT": "0s"}, mention: []string{"CHATD_APPROVAL_TIMEOUT"}},
		{name: "retain done not a duration", env: map[string]string{"CHATD_RETAIN_DONE": "a week"}, mention: []string{"CHATD_RETAIN_DONE"}},
		{name: "retain sessions too short", env: map[string]string{"CHATD_RETAIN_SESSIONS": "10m"}, mention: []string{"CHATD_RETAIN_SESSIONS", "1h"}},
		{name: "retain tool output zero", env: map[string]string{"CHATD_RETAIN_TOOL_OUTPUT": "0"}, mention: []string{"CHATD_RETAIN_TOOL_OUTPUT"}},
		{name: "webhook URL without a secret", env: map[string]string{"CHATD_WEBHOOK_URL": "http://127.0.0.1:9/hook"}, mention: []string{"CHATD_WEBHOOK_SECRET", "whsec_"}},
		{name: "webhook secret without a URL", env: map[string]string{"CHATD_WEBHOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, mention: []string{"CHATD_WEBHOOK_URL"}},
		{name: "webhook secret not whsec", env: map[string]string{"CHATD_WEBHOOK_URL": "http://127.0.0.1:9/hook", "CHATD_WEBHOOK_SECRET": "hunter2"}, mention: []string{"CHATD_WEBHOOK_SECRET", "whsec_"}},
		{name: "webhook URL not http", env: map[string]string{"CHATD_WEBHOOK_URL": "ftp://x/hook", "CHATD_WEBHOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, mention: []string{"CHATD_WEBHOOK_URL", "ftp://x/hook"}},
		{name: "approval expire negative", env: map[string]string{"CHATD_APPROVAL_EXPIRE": "-1m"}, mention: []string{"CHATD_APPROVAL_EXPIRE", "-approval-expire"}},
		{name: "sandbox idle pause zero", env: map[string]string{"CHATD_SANDBOX_IDLE_PAUSE": "0s"}, mention: []string{"CHATD_SANDBOX_IDLE_PAUSE"}},
		{name: "sandbox kill after bad", env: map[string]string{"CHATD_SANDBOX_KILL_AFTER": "soon"}, mention: []string{"CHATD_SANDBOX_KILL_AFTER"}},
		{name: "workspace retention not a duration", env: map[string]string{"CHATD_WORKSPACE_RETENTION": "a week"}, mention: []string{"CHATD_WORKSPACE_RETENTION", "a week", "7d"}},
		{name: "workspace retention negative", env: map[string]string{"CHATD_WORKSPACE_RETENTION": "-1h"}, mention: []string{"CHATD_WORKSPACE_RETENTION", "-workspace-retention", "off"}},
		{name: "workspace retention negative days", env: map[string]string{"CHATD_WORKSPACE_RETENTION": "-2d"}, mention: []string{"CHATD_WORKSPACE_RETENTION", "-2d"}},
		{name: "workspace retention fractional days flag", args: []string{"-workspace-retention", "1.5d"}, mention: []string{"workspace-retention", "7d"}},
		{name: "unknown double-text policy", env: map[string]string{"CHATD_DOUBLE_TEXT": "later"}, mention: []string{"CHATD_DOUBLE_TEXT", "queue, steer, interrupt or reject"}},
		{name: "lease ttl too short", env: map[string]string{"CHATD_LEASE_TTL": "100ms"}, mention: []string{"CHATD_LEASE_TTL", "300ms"}},
		{name: "node addr without port", env: map[string]string{"CHATD_NODE_ADDR": "10.0.0.7"}, mention: []string{"CHATD_NODE_ADDR", "host:port"}},
		{name: "abandon after negative", env: map[string]string{"CHATD_ABANDON_AFTER": "-1m"}, mention: []string{"CHATD_ABANDON_AFTER"}},
		{name: "max steps zero", env: map[string]string{"CHATD_MAX_STEPS": "0"}, mention: []string{"CHATD_MAX_STEPS"}},
		{name: "shell tool maybe", env: map[string]string{"CHATD_SHELL_TOOL": "maybe"}, mention: []string{"CHATD_SHELL_TOOL"}},
		{name: "unknown sandbox", env: map[string]string{"CHATD_SANDBOX": "docker"}, mention: []string{"CHATD_SANDBOX", "docker", "bwrap or local"}},
		{name: "sandbox network maybe", env: map[string]string{"CHATD_SANDBOX_NETWORK": "maybe"}, mention: []string{"CHATD_SANDBOX_NETWORK"}},
		{name: "sandbox cpu time in ms", env: map[string]string{"CHATD_SANDBOX_CPU_TIME": "1500ms"}, mention: []string{"CHATD_SANDBOX_CPU_TIME", "whole seconds"}},
		{name: "sandbox processes negative", env: map[string]string{"CHATD_SANDBOX_PROCESSES": "-1"}, mention: []string{"CHATD_SANDBOX_PROCESSES"}},
		{name: "sandbox memory not a size", env: map[string]string{"CHATD_SANDBOX_MEMORY": "lots"}, mention: []string{"CHATD_SANDBOX_MEMORY"}},
		{name: "sandbox total memory not a size", env: map[string]string{"CHATD_SANDBOX_TOTAL_MEMORY": "lots"}, mention: []string{"CHATD_SANDBOX_TOTAL_MEMORY"}},
		{name: "sandbox disk over 1TiB", env: map[string]string{"CHATD_SANDBOX_DISK": "2048GiB"}, mention: []string{"CHATD_SANDBOX_DISK", "too large"}},
		{name: "sandbox open files too few", env: map[string]string{"CHATD_SANDBOX_OPEN_FILES": "3"}, mention: []string{"CHATD_SANDBOX_OPEN_FILES", "at least 16"}},
		{name: "sandbox open files negative flag", args: []string{"-sandbox-open-files", "-1"}, mention: []string{"CHATD_SANDBOX_OPEN_FILES", "-sandbox-open-files"}},
		{name: "pprof maybe", env: map[string]string{"CHATD_PPROF": "maybe"}, mention: []string{"CHATD_PPROF", "on or off"}},
		{name: "pprof flag maybe", args: []string{"-pprof=maybe"}, mention: []string{"pprof"}},
		{name: "unknown agent", env: map[string]string{"CHATD_AGENT": "gemini"}, mention: []string{"CHATD_AGENT", "gemini", "openai"}},
		{name: "model with the synthetic agent", env: map[string]string{"CHATD_AGENT": "synth", "CHATD_MODEL": "m"}, mention: []string{"CHATD_MODEL", "synth"}},
		{name: "model without a provider", env: map[string]string{"CHATD_MODEL": "gpt-4.1"}, mention: []string{"CHATD_MODEL", "CHATD_AGENT=openai"}},
		{name: "openai without a model", env: map[string]string{"CHATD_AGENT": "openai", "OPENAI_BASE_URL": "http://localhost:11434/v1"}, mention: []string{"CHATD_MODEL"}},
		{name: "openai without key or base URL", env: map[string]string{"CHATD_AGENT": "openai", "CHATD_MODEL": "gpt-4.1"}, mention: []string{"OPENAI_API_KEY", "OPENAI_BASE_URL"}},
		{name: "openai base URL not a URL", env: map[string]string{"CHATD_AGENT": "openai", "CHATD_MODEL": "m", "OPENAI_BASE_URL": "localhost:11434"}, mention: []string{"OPENAI_BASE_URL", "http://"}},
		{name: "anthropic without a model", env: map[string]string{"CHATD_AGENT": "anthropic", "ANTHROPIC_API_KEY": "k"}, mention: []string{"CHATD_MODEL"}},
		{name: "anthropic without a key", env: map[string]string{"CHATD_AGENT": "anthropic", "CHATD_MODEL": "claude"}, mention: []string{"ANTHROPIC_API_KEY"}},
		{name: "anthropic base URL not a URL", env: map[string]string{"CHATD_AGENT": "anthropic", "CHATD_MODEL": "claude", "ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": "ftp://x"}, mention: []string{"ANTHROPIC_BASE_URL"}},
		{name: "thinking budget for openai", env: map[string]string{"CHATD_AGENT": "openai", "CHATD_MODEL": "m", "OPENAI_API_KEY": "k", "CHATD_THINKING_BUDGET": "2048"}, mention: []string{"CHATD_THINKING_BUDGET", "anthropic"}},
		{name: "thinking budget negative", env: map[string]string{"CHATD_AGENT": "anthropic", "CHATD_MODEL": "m", "ANTHROPIC_API_KEY": "k", "CHATD_THINKING_BUDGET": "-1"}, mention: []string{"CHATD_THINKING_BUDGET"}},
		{name: "context tokens too small", env: map[string]string{"CHATD_CONTEXT_TOKENS": "10"}, mention: []string{"CHATD_CONTEXT_TOKENS"}},
		{name: "max tokens negative", env: map[string]string{"CHATD_MAX_TOKENS": "-1"}, mention: []string{"CHATD_MAX_TOKENS"}},
		{name: "model timeout zero", env: map[string]string{"CHATD_MODEL_TIMEOUT": "0s"}, mention: []string{"CHATD_MODEL_TIMEOUT"}},
		{name: "empty addr flag", args: []string{"-addr", ""}, mention: []string{"CHATD_ADDR"}},
		{name: "empty admin addr", env: map[string]string{"CHATD_ADMIN_ADDR": ""}, args: []string{"-admin-addr", ""}, mention: []string{"CHATD_ADMIN_ADDR", "off"}},
		{name: "admin addr is the public one", args: []string{"-addr", "127.0.0.1:8080", "-admin-addr", "127.0.0.1:8080"}, mention: []string{"CHATD_ADMIN_ADDR", "CHATD_ADDR"}},
		{name: "pprof without an admin listener", env: map[string]string{"CHATD_PPROF": "on", "CHATD_ADMIN_ADDR": "off"}, mention: []string{"CHATD_PPROF", "CHATD_ADMIN_ADDR"}},
		{name: "bad byte size flag", args: []string{"-ring-bytes", "huge"}, mention: []string{"ring-bytes"}},
		{name: "unknown flag", args: []string{"-no-such-flag"}, mention: []string{"no-such-flag"}},
		{name: "stray argument", args: []string{"serve"}, mention: []string{"serve"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"DATABASE_URL": "postgres://db/chatd"}
			if tc.noDB {
				delete(env, "DATABASE_URL")
			}
			for k, v := range tc.env {
				env[k] = v
			}
			_, err := ConfigFromEnv(tc.args, envMap(env), &bytes.Buffer{})
			require.Error(t, err)
			for _, s := range tc.mention {
				require.Contains(t, err.Error(), s)
			}
		})
	}
}

func TestRunBadConfigExits2(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		mention string
	}{
		{name: "missing DATABASE_URL", env: map[string]string{}, mention: "DATABASE_URL"},
		{name: "bad ring events", env: map[string]string{"DATABASE_URL": "postgres://db/chatd", "CHATD_RING_EVENTS": "abc"}, mention: "CHATD_RING_EVENTS"},
		{name: "bad log level", env: map[string]string{"DATABASE_URL": "postgres://db/chatd", "CHATD_LOG_LEVEL": "loud"}, mention: "CHATD_LOG_LEVEL"},
		{name: "bad flag", args: []string{"-demo-delay", "slow"}, env: map[string]string{"DATABASE_URL": "postgres://db/chatd"}, mention: "demo-delay"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			code := Command(tc.args, envMap(tc.env), &stderr)
			require.Equal(t, 2, code, "stderr: %s", stderr.String())
			require.Contains(t, stderr.String(), tc.mention)
			require.Contains(t, stderr.String(), "chatd")
		})
	}

	t.Run("help exits 0", func(t *testing.T) {
		var stderr bytes.Buffer
		require.Equal(t, 0, Command([]string{"-help"}, envMap(nil), &stderr))
		require.Contains(t, stderr.String(), "CHATD_RING_EVENTS")
	})
}

// TestHelpShowsByteSizeDefaults checks that `chatd -help` shows the real default of each
// byte-size flag, as it does for every other flag.
func TestHelpShowsByteSizeDefaults(t *testing.T) {
	var usage bytes.Buffer
	_, err := ConfigFromEnv([]string{"-help"}, envMap(nil), &usage)
	require.ErrorIs(t, err, flag.ErrHelp)

	// Each flag's entry starts with "\n  -name".
	entries := map[string]string{}
	for _, e := range strings.Split(usage.String(), "\n  -")[1:] {
		name, _, _ := strings.Cut(e, " ")
		entries[name] = e
	}
	for name, forms := range map[string][]string{
		"ring-bytes":        {"4194304", "4MiB"},
		"send-queue-bytes":  {"1048576", "1MiB"},
		"read-limit":        {"262144", "256KiB"},
		"max-content-bytes": {"131072", "128KiB"},
	} {
		entry, ok := entries[name]
		require.True(t, ok, "-%s is not in the usage:\n%s", name, usage.String())
		require.NotContains(t, entry, "(default 0)", "-%s shows a default of 0", name)
		found := false
		for _, f := range forms {
			found = found || strings.Contains(entry, "(default "+f+")")
		}
		require.True(t, found, "-%s should show its default %s; usage entry: %q", name, forms[1], entry)
	}
}

// ---------------------------------------------------------------------------------------
// chatd as a child process

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// child is chatd running as a separate process.
type child struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	// host is where the child is reached; addr is host with the port it listens on, and
	// admin its admin listener's address ("" for none): both are known once it listens.
	host  string
	addr  string
	admin string
	log   *syncBuffer

	done     chan struct{} // closed once the process has exited and been reaped
	exitedAt time.Time     // set before done is closed
}

// freeAddr returns a loopback address nothing listens on right now. Nothing keeps it
// free: another process may bind it before whoever it was picked for does. A chatd child
// listens on port 0 instead and says which port it got (startChildOn).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// startChild starts chatd as a child process with env added to the test's environment,
// and waits until it answers /healthz. It is killed, if still running, when the test ends,
// and its log is printed when the test failed. It listens, and has its admin listener,
// on loopback ports the kernel picks as it binds them: a port picked beforehand, by
// listening on it and closing it, may be taken by another process before the child
// binds it (a test's connections to PostgreSQL get their local ports from the same
// range), and the child fails with "address already in use".
func startChild(t *testing.T, name string, env map[string]string) *child {
	t.Helper()
	return startChildOn(t, name, "127.0.0.1:0", "127.0.0.1", []string{"-admin-addr", "127.0.0.1:0"}, env)
}

// restartChild starts chatd again where prev listened (prev has exited): the same node,
// as a restarted process on its host is. Its port is prev's, so it cannot be left to
// the kernel.
func restartChild(t *testing.T, prev *child, name string, env map[string]string) *child {
	t.Helper()
	return startChildOn(t, name, prev.addr, prev.host, []string{"-admin-addr", "127.0.0.1:0"}, env)
}

// startChildOn is startChild listening on listen (which may be every interface, and
// port 0 for one the kernel picks), reached on host, with more command-line arguments.
func startChildOn(t *testing.T, name, listen, host string, args []string, env map[string]string) *child {
	t.Helper()
	c := &child{t: t, name: name, host: host, log: &syncBuffer{}, done: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], append([]string{"-addr", listen}, args...)...)
	c.cmd.Env = append(os.Environ(), childEnv+"=1", "CHATD_LOG_FORMAT=json", "CHATD_LOG_LEVEL=debug")
	for k, v := range env {
		c.cmd.Env = append(c.cmd.Env, k+"="+v)
	}
	c.cmd.Stdout = c.log
	c.cmd.Stderr = c.log
	require.NoError(t, c.cmd.Start())
	go func() {
		_ = c.cmd.Wait()
		c.exitedAt = time.Now()
		close(c.done)
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = c.cmd.Process.Kill()
			<-c.done
		}
		if t.Failed() {
			t.Logf("log of %s (%s, %s):\n%s", c.name, c.addr, c.cmd.ProcessState, c.log.String())
		}
	})
	c.waitHealthy()
	return c
}

// waitHealthy waits for the log line that says where the child listens, then polls GET
// /healthz until it answers 200, the process exits, or a deadline.
func (c *child) waitHealthy() {
	c.t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: time.Second}

	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	lastErr := errors.New("it has not said where it listens")
	for {
		select {
		case <-c.done:
			c.t.Fatalf("%s exited before it answered /healthz: %s\n%s", c.name, c.cmd.ProcessState, c.log.String())
		case <-deadline.C:
			c.t.Fatalf("%s did not answer /healthz at %q in time (last error: %v)", c.name, c.addr, lastErr)
		case <-ticker.C:
		}
		if c.addr == "" && !c.listening() {
			continue
		}
		resp, err := hc.Get("http://" + c.addr + "/healthz")
		if err != nil {
			lastErr = err
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return
		}
		lastErr = fmt.Errorf("status %s", resp.Status)
	}
}

// listening reads where the child listens from its log line "chatd listening" (Server's
// logListening, which comes once both listeners are bound) and sets addr and admin; it
// reports false while there is no such line yet.
func (c *child) listening() bool {
	for _, line := range strings.Split(c.log.String(), "\n") {
		var l struct {
			Message string `json:"message"`
			Addr    string `json:"addr"`
			Admin   string `json:"admin_addr"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || !strings.HasPrefix(l.Message, "chatd listening") {
			continue
		}
		_, port, err := net.SplitHostPort(l.Addr)
		require.NoError(c.t, err, "the address in %s", line)
		c.addr = net.JoinHostPort(c.host, port)
		if l.Admin != AdminOff {
			c.admin = l.Admin
		}
		return true
	}
	return false
}

// adminAddr is where the child's admin listener listens.
func (c *child) adminAddr() string {
	c.t.Helper()
	require.NotEmpty(c.t, c.admin, "%s has no admin listener", c.name)
	return c.admin
}

// wsURL is the child's WebSocket endpoint.
func (c *child) wsURL() string { return "ws://" + c.addr + "/v1/ws" }

// signal sends sig to the process.
func (c *child) signal(sig os.Signal) {
	c.t.Helper()
	require.NoError(c.t, c.cmd.Process.Signal(sig), "signal %s", c.name)
}

// wait waits up to timeout for the process to exit and returns its state.
func (c *child) wait(timeout time.Duration) *os.ProcessState {
	c.t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-c.done:
		return c.cmd.ProcessState
	case <-timer.C:
		c.t.Fatalf("%s did not exit within %s", c.name, timeout)
		return nil
	}
}

// openStore opens the database at url for checks; the pool closes when the test ends.
func openStore(t *testing.T, url string) *store.Store {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return store.New(pool)
}

func dbCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// sessionMessages returns every stored message of the session, in position order.
func sessionMessages(t *testing.T, st *store.Store, sessionID string) []chat.Message {
	t.Helper()
	id, err := uuid.Parse(sessionID)
	require.NoError(t, err)
	msgs, hasMore, err := st.MessagesBefore(dbCtx(t), id, 0, 200)
	require.NoError(t, err)
	require.False(t, hasMore)
	return msgs
}

func toWire(t *testing.T, msgs []chat.Message) []wstest.Message {
	t.Helper()
	w, err := wstest.FromStore(msgs)
	require.NoError(t, err)
	return w
}

func getRun(t *testing.T, st *store.Store, runID string) chat.Run {
	t.Helper()
	id, err := uuid.Parse(runID)
	require.NoError(t, err)
	run, err := st.RunGet(dbCtx(t), id)
	require.NoError(t, err)
	return run
}

// byID returns the message with id from msgs.
func byID(t *testing.T, msgs []chat.Message, id string) chat.Message {
	t.Helper()
	for _, m := range msgs {
		if m.ID.String() == id {
			return m
		}
	}
	t.Fatalf("message %s is not stored", id)
	return chat.Message{}
}

// ---------------------------------------------------------------------------------------
// Crash and restart

// logSlack is what requireLogged allows beyond one interval of the stream log: the time
// its loop and its statement take, and scheduling on a loaded machine.
const logSlack = 50 * time.Millisecond

// received is a piece of text a client was sent, and when it arrived.
type received struct {
	at   time.Time
	text string
}

// requireLogged checks what a stream log kept of a segment against what a client saw of
// it (pieces, in order) until the process died at killed: a prefix of it (nothing the
// client was not shown, nothing garbled) that holds everything the client had received
// an interval (plus logSlack) before the crash.
func requireLogged(t *testing.T, pieces []received, logged string, killed time.Time, interval time.Duration) {
	t.Helper()
	var seen, old strings.Builder
	for _, p := range pieces {
		seen.WriteString(p.text)
		if p.at.Before(killed.Add(-interval - logSlack)) {
			old.WriteString(p.text)
		}
	}
	require.True(t, strings.HasPrefix(seen.String(), logged), "the log holds %q, not a prefix of what the client saw, %q", logged, seen.String())
	require.True(t, strings.HasPrefix(logged, old.String()), "the log holds %q, less than what the client had %s before the crash, %q", logged, interval+logSlack, old.String())
}

// kill -9 mid-reply, and a restart with CHATD_RECOVER=interrupt: the run ends
// interrupted, the segments that closed keep their text, and the segment that was open
// keeps what its stream log held, a prefix of what the client saw, at most an interval
// (CHATD_STREAM_SYNC) short of it.
func TestCrashMarksRunInterrupted(t *testing.T) {
	dbURL := storetest.NewURL(t)
	st := openStore(t, dbURL)
	env := map[string]string{
		"DATABASE_URL":      dbURL,
		"CHATD_DEMO_DELAY":  "20ms",
		"CHATD_DEMO_WORDS":  "200",
		"CHATD_STREAM_SYNC": "50ms",
	}
	first := startChild(t, "chatd (to be killed)", env)

	c := wstest.Dial(t, first.wsURL(), nil)
	snap := c.Hello("")
	require.Equal(t, "snapshot", snap.Type)
	sessionID := snap.SessionID
	require.NotEmpty(t, sessionID)

	const content = "please call the tool for me"
	require.True(t, demo.MentionsTool(content))
	ack := c.Chat("req-crash", content)
	require.Equal(t, "ack", ack.Type, "chat.send answered with %s", ack.Raw)
	runID := ack.RunID
	require.NotEmpty(t, runID)

	// Read until the second assistant segment (after the tool) has streamed ten deltas
	// (200 ms at 20 ms a word: a few intervals of the stream log).
	var seg1, toolID, seg2 string
	seen := 0
	var pieces []received
	for done := false; !done; {
		for ; seen < len(c.Seen); seen++ {
			f := c.Seen[seen]
			require.False(t, f.Terminal(), "the run ended before the crash: %s", f.Raw)
			switch f.Type {
			case "assistant.segment.started":
				if toolID == "" {
					seg1 = f.Message.ID
				} else {
					seg2 = f.Message.ID
				}
			case "tool.end":
				toolID = f.Message.ID
			case "chat.delta":
				if seg2 != "" && f.MessageID == seg2 {
					pieces = append(pieces, received{time.Now(), *f.Text})
					done = len(pieces) == 10
				}
			}
		}
		if !done {
			c.Read()
		}
	}
	require.NotEmpty(t, seg1)
	require.NotEqual(t, seg1, seg2)

	seg1Text := c.State.Messages[seg1].Content
	words := demo.Reply(content, 200)
	require.Equal(t, strings.Join(words[:len(words)/2], " "), seg1Text, "the first segment holds the first half of the reply")
	require.Equal(t, "complete", c.State.Messages[seg1].Status)
	require.NotEmpty(t, c.State.Messages[seg2].Content)

	// Crash: SIGKILL, no cleanup of any kind runs.
	killed := time.Now()
	first.signal(syscall.SIGKILL)
	ps := first.wait(15 * time.Second)
	require.False(t, ps.Success())
	ws, ok := ps.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "exit: %s", ps)

	// What the dead process left behind: the run still running, the open segment
	// streaming with no content (content is written only at segment boundaries), and its
	// text so far in the stream log.
	run := getRun(t, st, runID)
	require.Equal(t, chat.RunRunning, run.Status)
	require.Nil(t, run.EndedAt)
	stored := sessionMessages(t, st, sessionID)
	require.Len(t, stored, 4, "user, segment, tool, segment")
	require.Equal(t, chat.MessageStreaming, byID(t, stored, seg2).Status)
	require.Equal(t, "", byID(t, stored, seg2).Content)
	// The client's view with the open segment's text not stored yet is the database.
	want := c.State.Sorted()
	for i := range want {
		if want[i].ID == seg2 {
			require.Equal(t, "streaming", want[i].Status)
			want[i].Content = ""
		}
	}
	require.Empty(t, wstest.Diff(toWire(t, stored), want))

	// Restart in-process on the same database.
	var logBuf syncBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log of the restarted chatd:\n%s", logBuf.String())
		}
	})
	// On the dead one's address: the same node, which takes its sessions back at once.
	cfg, err := ConfigFromEnv([]string{"-addr", first.addr, "-admin-addr", "127.0.0.1:0"}, envMap(map[string]string{
		"DATABASE_URL":     dbURL,
		"CHATD_LOG_FORMAT": "json",
		"CHATD_LOG_LEVEL":  "debug",
		"CHATD_RECOVER":    "interrupt", // today's behaviour, kept as an option
	}), &logBuf)
	require.NoError(t, err)
	logger, err := newLogger(cfg, &logBuf)
	require.NoError(t, err)
	m := newServer(cfg, logger)
	closed := false
	t.Cleanup(func() {
		if !closed {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			_ = m.Shutdown(ctx)
		}
	})
	runCtx, cancelRun := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelRun()
	require.NoError(t, m.Start(runCtx))
	require.Contains(t, logBuf.String(), "took up runs whose node died or shut down")

	run = getRun(t, st, runID)
	require.Equal(t, chat.RunInterrupted, run.Status)
	require.NotNil(t, run.Error)
	require.Equal(t, "interrupted", run.Error.Code)
	require.NotNil(t, run.EndedAt)

	stored = sessionMessages(t, st, sessionID)
	require.Len(t, stored, 4)
	require.Equal(t, chat.RoleUser, stored[0].Role)
	require.Equal(t, content, stored[0].Content)
	require.Equal(t, chat.MessageComplete, stored[0].Status)

	s1 := byID(t, stored, seg1)
	require.Equal(t, chat.RoleAssistant, s1.Role)
	require.Equal(t, chat.MessageComplete, s1.Status)
	require.Equal(t, seg1Text, s1.Content, "the closed segment keeps its full text")

	tool := byID(t, stored, toolID)
	require.Equal(t, chat.RoleTool, tool.Role)
	require.Equal(t, chat.MessageComplete, tool.Status)
	require.NotNil(t, tool.Tool)
	require.Equal(t, demo.ToolName, tool.Tool.Name)
	require.Equal(t, chat.ToolOK, tool.Tool.Status)
	require.NotNil(t, tool.Tool.Output)
	// The demo's "tool" is current_time: the time, as "Friday, 2026-11-20T22:47:24Z".
	require.Regexp(t, `^[A-Z][a-z]+day, \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`, *tool.Tool.Output)

	s2 := byID(t, stored, seg2)
	require.Equal(t, chat.MessageInterrupted, s2.Status)
	// The open segment keeps what its stream log held: judged by what this process
	// stored, since the dead one's last statement may have committed after it died.
	requireLogged(t, pieces, s2.Content, killed, 50*time.Millisecond)
	for i := range want {
		if want[i].ID == seg2 {
			want[i].Content = s2.Content
		}
	}
	require.Equal(t, []string{stored[0].ID.String(), seg1, toolID, seg2},
		[]string{stored[0].ID.String(), stored[1].ID.String(), stored[2].ID.String(), stored[3].ID.String()})

	// A client that connects now sees exactly that, and no active run.
	c2 := wstest.Dial(t, "ws://"+m.Addr()+"/v1/ws", nil)
	snap2 := c2.Hello(sessionID)
	require.Equal(t, "snapshot", snap2.Type)
	require.NotEqual(t, snap.Epoch, snap2.Epoch, "a new process is a new epoch")
	var raw map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(snap2.Raw, &raw))
	require.Contains(t, raw, "activeRun")
	require.Equal(t, "null", string(raw["activeRun"]))
	require.Empty(t, wstest.Diff(toWire(t, stored), c2.State.Sorted()))
	statuses := map[string]string{}
	for _, msg := range snap2.Messages {
		statuses[msg.ID] = msg.Status
	}
	require.Equal(t, map[string]string{stored[0].ID.String(): "complete", seg1: "complete", toolID: "complete", seg2: "interrupted"}, statuses)

	// The old client's view, with the text cut to what was logged and the segment
	// interrupted, is what the server now holds.
	for i := range want {
		if want[i].ID == seg2 {
			want[i].Status = "interrupted"
			want[i].Error = &wstest.ErrorInfo{Code: "interrupted", Message: "the server stopped while this was being written"}
		}
	}
	require.Empty(t, wstest.Diff(want, c2.State.Sorted()))

	c2.WS.CloseNow()
	closed = true
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	require.NoError(t, m.Shutdown(ctx))
	// Its log went once its text was stored (at the log's next interval, at the
	// latest the last one, as chatd stopped).
	left, err := st.StreamLogRead(dbCtx(t), []uuid.UUID{uuid.MustParse(seg2)})
	require.NoError(t, err)
	require.Empty(t, left)
}

// ---------------------------------------------------------------------------------------
// Graceful shutdown

func TestShutdownInterruptsRunsAndClosesWith1001(t *testing.T) {
	const shutdownTimeout = 5 * time.Second
	dbURL := storetest.NewURL(t)
	st := openStore(t, dbURL)
	srv := startChild(t, "chatd", map[string]string{
		"DATABASE_URL":           dbURL,
		"CHATD_DEMO_DELAY":       "20ms",
		"CHATD_DEMO_WORDS":       "500",
		"CHATD_SHUTDOWN_TIMEOUT": shutdownTimeout.String(),
		"CHATD_RECOVER":          "interrupt", // continue suspends runs instead (recover_test.go)
	})

	c1 := wstest.Dial(t, srv.wsURL(), nil)
	snap := c1.Hello("")
	require.Equal(t, "snapshot", snap.Type)
	sessionID := snap.SessionID
	c2 := wstest.Dial(t, srv.wsURL(), nil)
	snap2 := c2.Hello(sessionID)
	require.Equal(t, "snapshot", snap2.Type)
	require.Equal(t, sessionID, snap2.SessionID)

	// Bystanders: a client of another session with no run, and one that never said hello.
	idle := wstest.Dial(t, srv.wsURL(), nil)
	require.Equal(t, "snapshot", idle.Hello("").Type)
	silent := wstest.Dial(t, srv.wsURL(), nil)

	ack := c1.Chat("req-shutdown", "tell me a long story")
	require.Equal(t, "ack", ack.Type, "chat.send answered with %s", ack.Raw)
	runID := ack.RunID

	countDeltas := func(c *wstest.Client) int {
		n := 0
		for _, f := range c.Seen {
			require.False(t, f.Terminal(), "the run ended early: %s", f.Raw)
			if f.Type == "chat.delta" {
				n++
			}
		}
		return n
	}
	for countDeltas(c1) < 5 {
		c1.Read()
	}
	for countDeltas(c2) < 1 {
		c2.Read()
	}

	sentAt := time.Now()
	srv.signal(syscall.SIGTERM)

	for i, c := range []*wstest.Client{c1, c2} {
		term := c.ReadTerminal()
		require.Equal(t, "chat.error", term.Type, "client %d: %s", i+1, term.Raw)
		require.NotNil(t, term.Run)
		require.Equal(t, runID, term.Run.RunID)
		require.Equal(t, "interrupted", term.Run.Status, "client %d: %s", i+1, term.Raw)
		require.NotNil(t, term.Run.Error, "client %d: %s", i+1, term.Raw)
		require.Equal(t, "interrupted", term.Run.Error.Code)
		require.EqualValues(t, 1001, c.ExpectClose(), "client %d closes with 1001 (going away)", i+1)
		require.Nil(t, c.State.ActiveRun)
	}

	require.EqualValues(t, 1001, idle.ExpectClose(), "an idle client closes with 1001")
	require.Empty(t, idle.Seen, "the idle session saw no events")
	require.EqualValues(t, 1001, silent.ExpectClose(), "a client without hello closes with 1001")

	ps := srv.wait(shutdownTimeout + 5*time.Second)
	require.Equal(t, 0, ps.ExitCode(), "exit: %s", ps)
	require.Less(t, srv.exitedAt.Sub(sentAt), shutdownTimeout, "chatd exits within CHATD_SHUTDOWN_TIMEOUT")
	require.Contains(t, srv.log.String(), `"stopped"`)

	// Both clients hold the same conversation, and it is what the database holds.
	require.Empty(t, wstest.Diff(c1.State.Sorted(), c2.State.Sorted()))

	run := getRun(t, st, runID)
	require.Equal(t, chat.RunInterrupted, run.Status)
	require.NotNil(t, run.Error)
	require.Equal(t, "interrupted", run.Error.Code)
	require.NotNil(t, run.EndedAt)

	stored := sessionMessages(t, st, sessionID)
	require.Len(t, stored, 2, "user message and one segment")
	seg := stored[1]
	require.Equal(t, chat.RoleAssistant, seg.Role)
	require.Equal(t, chat.MessageInterrupted, seg.Status)
	require.NotEmpty(t, seg.Content, "the text streamed so far is stored at shutdown")
	require.Equal(t, c1.State.Messages[seg.ID.String()].Content, seg.Content)
	require.Empty(t, wstest.Diff(toWire(t, stored), c1.State.Sorted()))
}

// serviceLog lists, in order, the "started" and "stopped" lines the service group logged,
// as "name started".
func serviceLog(t *testing.T, log string) []string {
	t.Helper()
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var entry struct{ Component, Message string }
		require.NoError(t, json.Unmarshal([]byte(line), &entry), line)
		if entry.Component != "" && (entry.Message == "started" || entry.Message == "stopped") {
			got = append(got, entry.Component+" "+entry.Message)
		}
	}
	return got
}

// The Server's parts start in one order and stop in the reverse: the rescuer first, the
// listener, then the hub (so interrupted runs' last events are queued, and its actors give
// their leases back), the journal (its last stream log interval), the transport's
// sockets, the sandboxes, the lease renewal (which gives back any lease left), and the
// database last.
func TestServicesStartAndStopInOrder(t *testing.T) {
	m, logBuf := startInProcess(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	require.NoError(t, m.Shutdown(ctx))
	require.NoError(t, m.Shutdown(ctx), "a second Shutdown has nothing left to do")
	require.Equal(t, []string{
		"database started", "lease-renewal started", "sandboxes started", "sandbox-janitor started",
		"transport started", "journal started", "hub started", "eviction started", "abandonment started", "memory started", "pacer started", "rescue started", "retention started", "admin-http started", "http started",
		"http stopped", "admin-http stopped", "retention stopped", "rescue stopped", "pacer stopped", "memory stopped", "abandonment stopped", "eviction stopped", "hub stopped", "journal stopped", "transport stopped", "sandbox-janitor stopped",
		"sandboxes stopped", "lease-renewal stopped", "database stopped",
	}, serviceLog(t, logBuf.String()))
}

// A chatd that died (SIGKILL, a crash) leaves running what its sandboxes' commands
// started in the background; the next one kills it before it serves, and says so.
func TestRunSweepsWhatADeadChatdsSandboxesLeft(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "local-0123456789abcdef")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "workspace"), 0o755))

	// The chatd that died: a process this test started and killed.
	died := exec.Command("sleep", "1000")
	require.NoError(t, died.Start())
	owner := fmt.Sprintf("%d:%s", died.Process.Pid, procStart(t, died.Process.Pid))
	require.NoError(t, died.Process.Kill())
	require.Error(t, died.Wait())

	// What its sandbox left: the environment every sandbox command carries.
	left := exec.Command("sleep", "1000")
	left.Env = []string{"CHATD_SANDBOX=" + root, "CHATD_SANDBOX_OWNER=" + owner}
	left.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, left.Start())
	exited := make(chan struct{})
	go func() { _ = left.Wait(); close(exited) }()
	t.Cleanup(func() { _ = left.Process.Kill(); <-exited })

	_, logBuf := startInProcess(t, map[string]string{"CHATD_SANDBOX_DIR": dir})
	// Run returned: the sweep had waited for the process to end (a zombie until reaped).
	select {
	case <-exited:
	default:
		require.Equal(t, "Z", procState(t, left.Process.Pid), "killed before chatd served")
	}
	var found bool
	for _, line := range strings.Split(strings.TrimSpace(logBuf.String()), "\n") {
		var entry struct {
			Message                      string
			Processes, Groups, Sandboxes int
		}
		require.NoError(t, json.Unmarshal([]byte(line), &entry), line)
		if strings.HasPrefix(entry.Message, "killed processes that sandboxes") {
			found = true
			require.Equal(t, [3]int{1, 1, 1}, [3]int{entry.Processes, entry.Groups, entry.Sandboxes})
		}
	}
	require.True(t, found, "the sweep is logged with its counts")
}

// procStat returns the fields of /proc/PID/stat after the command name (state first).
func procStat(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

func procState(t *testing.T, pid int) string { return procStat(t, pid)[0] }

func procStart(t *testing.T, pid int) string { return procStat(t, pid)[19] }

// ---------------------------------------------------------------------------------------
// Start-up failures

func TestRunFailsWithoutDatabase(t *testing.T) {
	// A port where nothing listens.
	dead := freeAddr(t)
	dbURL := "postgres://chatd:s3cret-pw@" + dead + "/chatd?sslmode=disable&connect_timeout=5"

	t.Run("Server.Start", func(t *testing.T) {
		var logBuf syncBuffer
		cfg, err := ConfigFromEnv([]string{"-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0"}, envMap(map[string]string{"DATABASE_URL": dbURL}), &logBuf)
		require.NoError(t, err)
		logger, err := newLogger(cfg, &logBuf)
		require.NoError(t, err)
		m := newServer(cfg, logger)

		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		errc := make(chan error, 1)
		start := time.Now()
		go func() { errc <- m.Start(ctx) }()
		timer := time.NewTimer(30 * time.Second)
		defer timer.Stop()
		select {
		case err = <-errc:
		case <-timer.C:
			t.Fatal("Server.Start did not return within 30s with no database")
		}
		require.Error(t, err)
		require.Less(t, time.Since(start), 20*time.Second)
		require.Contains(t, err.Error(), "connect to the database")
		require.Contains(t, err.Error(), dead, "the error names where it tried")
		require.NotContains(t, err.Error(), "s3cret-pw", "the password is not shown")

		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		require.NoError(t, m.Shutdown(cctx), "Shutdown after a failed Start")
	})

	t.Run("address in use", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()

		var logBuf syncBuffer
		cfg, err := ConfigFromEnv([]string{"-addr", ln.Addr().String(), "-admin-addr", "127.0.0.1:0"}, envMap(map[string]string{"DATABASE_URL": storetest.NewURL(t)}), &logBuf)
		require.NoError(t, err)
		logger, err := newLogger(cfg, &logBuf)
		require.NoError(t, err)
		m := newServer(cfg, logger)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = m.Start(ctx)
		require.Error(t, err)
		require.Contains(t, err.Error(), "listen on "+ln.Addr().String())
		require.NoError(t, m.Shutdown(ctx), "Shutdown after a Start that failed part way")
	})

	t.Run("admin address in use", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()

		var logBuf syncBuffer
		cfg, err := ConfigFromEnv([]string{"-addr", "127.0.0.1:0", "-admin-addr", ln.Addr().String()}, envMap(map[string]string{"DATABASE_URL": storetest.NewURL(t)}), &logBuf)
		require.NoError(t, err)
		logger, err := newLogger(cfg, &logBuf)
		require.NoError(t, err)
		m := newServer(cfg, logger)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = m.Start(ctx)
		require.Error(t, err)
		require.Contains(t, err.Error(), "listen on "+ln.Addr().String())
		require.NoError(t, m.Shutdown(ctx), "Shutdown after a Start that failed part way")
	})

	t.Run("run exits 1", func(t *testing.T) {
		var stderr syncBuffer
		code := make(chan int, 1)
		go func() {
			code <- Command([]string{"-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0", "-log-format", "json"}, envMap(map[string]string{"DATABASE_URL": dbURL}), &stderr)
		}()
		timer := time.NewTimer(30 * time.Second)
		defer timer.Stop()
		select {
		case c := <-code:
			require.Equal(t, 1, c, "stderr: %s", stderr.String())
		case <-timer.C:
			t.Fatal("run did not return within 30s with no database")
		}
		require.Contains(t, stderr.String(), "could not start")
		require.Contains(t, stderr.String(), "connect to the database")
		require.NotContains(t, stderr.String(), "s3cret-pw")
	})
}

func TestShellToolFlag(t *testing.T) {
	for args, want := range map[string]bool{"-shell-tool": true, "-shell-tool=on": true, "-shell-tool=off": false, "-shell-tool=true": true} {
		cfg, err := ConfigFromEnv([]string{args}, envMap(map[string]string{"DATABASE_URL": "postgres://db/x", "CHATD_SHELL_TOOL": "off"}), io.Discard)
		require.NoError(t, err, args)
		require.Equal(t, want, cfg.ShellTool, args)
	}
	_, err := ConfigFromEnv([]string{"-shell-tool=maybe"}, envMap(map[string]string{"DATABASE_URL": "postgres://db/x"}), io.Discard)
	require.Error(t, err)
}

func TestPprofFlag(t *testing.T) {
	for args, want := range map[string]bool{"-pprof": true, "-pprof=on": true, "-pprof=off": false, "-pprof=false": false} {
		cfg, err := ConfigFromEnv([]string{args}, envMap(map[string]string{"DATABASE_URL": "postgres://db/x", "CHATD_PPROF": "off"}), io.Discard)
		require.NoError(t, err, args)
		require.Equal(t, want, cfg.Pprof, args)
	}
	cfg, err := ConfigFromEnv(nil, envMap(map[string]string{"DATABASE_URL": "postgres://db/x", "CHATD_PPROF": "ON"}), io.Discard)
	require.NoError(t, err)
	require.True(t, cfg.Pprof)
}

// ---------------------------------------------------------------------------------------
// Pings

// CHATD_PING_INTERVAL and CHATD_PING_TIMEOUT reach the connections: a client that does
// not answer pings is dropped after a fraction of a second instead of the default 35 s.
func TestPingSettings(t *testing.T) {
	m, _ := startInProcess(t, map[string]string{
		"DATABASE_URL":        storetest.NewURL(t),
		"CHATD_PING_INTERVAL": "50ms",
		"CHATD_PING_TIMEOUT":  "100ms",
	})
	pinged := make(chan struct{}, 1)
	c := wstest.Dial(t, "ws://"+m.Addr()+"/v1/ws", &wstest.DialOptions{
		OnPingReceived: func(context.Context, []byte) bool {
			select {
			case pinged <- struct{}{}:
			default:
			}
			return false // never answer
		},
	})
	// No hello: nothing but the unanswered ping closes the connection within 15 s.
	require.EqualValues(t, -1, c.ExpectClose(), "cut without a close frame")
	require.Len(t, pinged, 1, "the server pinged")
}

// ---------------------------------------------------------------------------------------
// Delta coalescing

// CHATD_COALESCE_DELTAS reaches the actors: a demo reply streamed with no pause comes in
// far fewer deltas than words, and what the client pieced together is what was stored.
func TestCoalesceDeltasOption(t *testing.T) {
	const words = 60
	dbURL := storetest.NewURL(t)
	m, _ := startInProcess(t, map[string]string{
		"DATABASE_URL":          dbURL,
		"CHATD_DEMO_DELAY":      "0s",
		"CHATD_DEMO_WORDS":      fmt.Sprint(words),
		"CHATD_COALESCE_DELTAS": "1s", // longer than the whole reply takes
	})

	c := wstest.Dial(t, "ws://"+m.Addr()+"/v1/ws", nil)
	sessionID := c.Hello("").SessionID
	require.Equal(t, "ack", c.Chat("r1", "hello").Type)
	require.Equal(t, "chat.done", c.ReadTerminal().Type)
	deltas := 0
	for _, f := range c.Seen {
		if f.Type == "chat.delta" {
			deltas++
		}
	}
	require.Less(t, deltas, words/2, "the words were merged into fewer deltas")
	stored := sessionMessages(t, openStore(t, dbURL), sessionID)
	require.Equal(t, strings.Join(demo.Reply("hello", words), " "), stored[1].Content)
	require.Empty(t, wstest.Diff(toWire(t, stored), c.State.Sorted()))
}

// The wiring of the HTTP sessions API: the list shows a demo conversation, and deleting
// it kills the sandbox its approved demo_sandbox call ran in (the real local provider).
func TestSessionsAPIDeletesTheSandbox(t *testing.T) {
	dir := t.TempDir()
	m, _ := startInProcess(t, map[string]string{
		"CHATD_DEMO_DELAY":  "0s",
		"CHATD_SANDBOX_DIR": dir,
	})
	c := wstest.Dial(t, "ws://"+m.Addr()+"/v1/ws", nil)
	id := c.Hello("").SessionID
	require.Equal(t, "ack", c.Chat("r1", "please approve a sandbox call").Type)
	wait := c.Await(func(f wstest.Frame) bool { return f.Type == "run.status" && f.Run.PendingApproval != nil })
	c.Send(map[string]any{"type": "tool.decide", "requestId": "d1", "toolCallId": wait.Run.PendingApproval.ToolCallID, "decision": "approve"})
	require.Equal(t, "chat.done", c.ReadTerminal().Type)
	sandboxID, err := m.db.Store().SessionSandbox(dbCtx(t), uuid.MustParse(id))
	require.NoError(t, err)
	require.NotEmpty(t, sandboxID, "the approved call ran in a sandbox")

	status, body := httpGet(t, m, "/v1/sessions")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `"id":"`+id+`"`)
	require.Contains(t, body, `"title":"please approve a sandbox call"`)

	ctx := dbCtx(t)
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, "http://"+m.Addr()+"/v1/sessions/"+id, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	http.DefaultClient.CloseIdleConnections()

	require.Equal(t, websocket.StatusCode(4004), c.ExpectClose())
	_, err = m.sandboxes.Connect(ctx, sandboxID)
	require.ErrorIs(t, err, sandbox.ErrGone)
	require.NoDirExists(t, filepath.Join(dir, sandboxID), "the workspace went with its session")
	status, body = httpGet(t, m, "/v1/sessions")
	require.Equal(t, http.StatusOK, status, body)
	require.JSONEq(t, `{"sessions":[],"nextCursor":null}`, body)
}
