package tools_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/agent/sandbox"
	"github.com/chatd/chatd/agent/sandbox/bwrap"
	"github.com/chatd/chatd/agent/sandbox/local"
	"github.com/chatd/chatd/agent/tools"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// env gives a tool a real local sandbox and records what it streams.
type env struct {
	sb  sandbox.Sandbox
	out bytes.Buffer
}

func (e *env) Output() io.Writer               { return &e.out }
func (e *env) Progress(int, int, string) error { return nil }
func (e *env) Sandbox(context.Context) (sandbox.Sandbox, error) {
	return e.sb, nil
}

func newEnv(t *testing.T) *env {
	t.Helper()
	p, err := local.New(t.TempDir())
	require.NoError(t, err)
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Kill(context.Background(), sb.ID()) })
	return &env{sb: sb}
}

func input(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

func TestShell(t *testing.T) {
	s := tools.Shell{}
	require.True(t, s.Spec().NeedsApproval, "every shell call needs approval")
	require.False(t, s.Spec().Idempotent, "a command cut off by a restart is not run again")

	e := newEnv(t)
	out, err := s.Run(context.Background(), input(map[string]string{"command": "echo hi; echo there >&2"}), e)
	require.NoError(t, err)
	require.Equal(t, "hi\nthere\n\n[exit code 0]", out)
	require.Equal(t, "hi\nthere\n", e.out.String(), "output is streamed as it comes")

	out, err = s.Run(context.Background(), input(map[string]string{"command": "echo partial; exit 7"}), e)
	require.EqualError(t, err, "the command exited with code 7")
	require.Equal(t, "partial\n\n[exit code 7]", out)

	for _, bad := range []json.RawMessage{input(map[string]string{"command": "  "}), json.RawMessage(`{"command": 5}`)} {
		_, err = s.Run(context.Background(), bad, e)
		require.Error(t, err)
	}
}

// The tool's time limit, and a call asking for less, stop the command.
func TestShellTimeLimit(t *testing.T) {
	e := newEnv(t)
	start := time.Now()
	_, err := tools.Shell{Timeout: time.Hour}.Run(context.Background(), input(map[string]any{"command": "sleep 30", "timeout_seconds": 1}), e)
	require.EqualError(t, err, "the command was stopped after 1s")
	require.Less(t, time.Since(start), 10*time.Second)

	_, err = tools.Shell{Timeout: 200 * time.Millisecond}.Run(context.Background(), input(map[string]any{"command": "sleep 30", "timeout_seconds": 60}), e)
	require.EqualError(t, err, "the command was stopped after 200ms", "a call cannot ask for more than the tool allows")
}

func TestCurrentTime(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 20, 22, 30, 0, 0, time.UTC))
	ct := tools.CurrentTime{Clock: clock}
	require.False(t, ct.Spec().NeedsApproval)
	require.True(t, ct.Spec().Idempotent, "a call cut off by a restart reads the clock again")
	out, err := ct.Run(context.Background(), json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	require.Equal(t, "Friday, 2026-11-20T22:30:00Z", out)
	out, err = ct.Run(context.Background(), input(map[string]string{"timezone": "Asia/Tokyo"}), nil)
	require.NoError(t, err)
	require.Equal(t, "Saturday, 2026-11-21T07:30:00+09:00", out)
	_, err = ct.Run(context.Background(), input(map[string]string{"timezone": "Mars/Olympus"}), nil)
	require.EqualError(t, err, `unknown time zone "Mars/Olympus"`)
}

// A huge timeout_seconds must not overflow into "no limit".
func TestShellTimeoutDoesNotOverflow(t *testing.T) {
	e := newEnv(t)
	_, err := tools.Shell{Timeout: 200 * time.Millisecond}.Run(context.Background(), input(map[string]any{"command": "sleep 30", "timeout_seconds": 9223372037}), e)
	require.EqualError(t, err, "the command was stopped after 200ms")
}

// newBwrapEnv gives a tool a bubblewrap sandbox (CHATD_BWRAP names bwrap, else PATH),
// configured by cfg.
func newBwrapEnv(t *testing.T, cfg bwrap.Config) *env {
	t.Helper()
	// When the tests run as root, bwrap runs as nobody, who must reach the workspace.
	dir := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o711))
	require.NoError(t, os.Chmod(dir, 0o711))
	cfg.Dir, cfg.Bwrap = dir, os.Getenv("CHATD_BWRAP")
	p, err := bwrap.New(cfg)
	require.NoError(t, err, "bubblewrap must be installed (scripts/bwrap.sh)")
	t.Cleanup(p.Close)
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	return &env{sb: sb}
}

// Over-long output keeps its head and its real end, with the exit code after it: the
// middle is left out, and one marker says how much. With bwrap the sandbox cuts it,
// with local the tool.
func TestShellKeepsTheEndOfLongOutput(t *testing.T) {
	for name, e := range map[string]*env{"local": newEnv(t), "bwrap": newBwrapEnv(t, bwrap.Config{})} {
		out, err := tools.Shell{}.Run(context.Background(), input(map[string]string{
			"command": "echo BEGIN; head -c 3000000 /dev/zero | tr '\\0' x; echo; echo END-MARKER; exit 3",
		}), e)
		require.EqualError(t, err, "the command exited with code 3", name)
		require.True(t, strings.HasPrefix(out, "BEGIN\nxxx"), "%s: %.20q", name, out)
		require.Equal(t, 1, strings.Count(out, "bytes of output left out]"), name)
		if name == "bwrap" {
			// The sandbox kept its 1 MiB, and the tool all of it.
			require.True(t, strings.Contains(out, sandbox.OmittedMarker(3000000+int64(len("BEGIN\n\nEND-MARKER\n"))-1<<20)), "%q", out[1<<19-20:1<<19+80])
		}
		require.True(t, strings.HasSuffix(out, "x\nEND-MARKER\n\n[exit code 3]"), "%s: %q", name, out[len(out)-50:])
	}
}

// A command that crosses a limit of the sandbox fails with an error that names it.
func TestShellSaysWhichLimit(t *testing.T) {
	e := newBwrapEnv(t, bwrap.Config{
		Limits:     &bwrap.Limits{FileSize: 1 << 20, Disk: 4 << 20},
		WatchEvery: 5 * time.Millisecond, DiskEvery: 5 * time.Millisecond,
	})
	out, err := tools.Shell{}.Run(context.Background(), input(map[string]string{"command": "head -c 2000000 /dev/zero > big"}), e)
	require.EqualError(t, err, "the command exited with code 153 at a limit of the sandbox: a process wrote past the largest file size, 1 MiB (SIGXFSZ, exit code 153)")
	require.Equal(t, "File size limit exceeded\n\n[exit code 153]", out)

	out, err = tools.Shell{}.Run(context.Background(), input(map[string]string{"command": "echo filling; i=0; while :; do head -c 500000 /dev/zero > f$i; i=$((i+1)); done"}), e)
	require.EqualError(t, err, "the command was stopped at a limit of the sandbox: the workspace grew past its limit of 4 MiB")
	require.Equal(t, "filling\n", out)
}
