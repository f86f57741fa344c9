package agent_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/sandbox"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store/storetest"
)

// A session's workspace is listed and its files served: nested ones with their sizes;
// never a path outside it (.., absolute, a symbolic link that leads out); a killed
// sandbox's workspace still, until it is removed; another node's not at all.
func TestWorkspaceFilesListedAndServed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	nodeA, nodeB := "node-a", "node-b"
	b := newJanitorBundle(t, st, &nodeA)
	sess, err := st.SessionCreate(ctx, chat.Session{ID: uuid.New(), Owner: "alice", CreatedAt: chat.Timestamp(b.clock.Now())})
	require.NoError(t, err)
	b.session = sess.ID
	_, _, err = b.sbs.Files(ctx, b.session)
	require.ErrorIs(t, err, agent.ErrNoWorkspace, "no sandbox yet")

	sb, _ := b.get(t)
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Command: "mkdir -p src/pkg && printf 'hello' > a.txt && printf 'package pkg' > src/pkg/p.go && ln -s /etc/passwd leak && ln -s .. up"})
	require.NoError(t, err)
	require.Zero(t, res.ExitCode)
	outside := filepath.Join(filepath.Dir(b.p.Workspace(sb.ID())), "secret")
	require.NoError(t, os.WriteFile(outside, []byte("not yours"), 0o600))

	files, more, err := b.sbs.Files(ctx, b.session)
	require.NoError(t, err)
	require.False(t, more)
	var paths []string
	for _, f := range files {
		paths = append(paths, f.Path)
		if f.Path == "a.txt" {
			require.EqualValues(t, 5, f.Size)
			require.False(t, f.ModifiedAt.IsZero())
		}
	}
	require.ElementsMatch(t, []string{"a.txt", "src/pkg/p.go"}, paths, "links are not listed")

	f, info, err := b.sbs.OpenFile(ctx, b.session, "src/pkg/p.go")
	require.NoError(t, err)
	body, _ := io.ReadAll(f)
	f.Close()
	require.Equal(t, "package pkg", string(body))
	require.EqualValues(t, 11, info.Size())

	for _, bad := range []string{"", "/etc/passwd", "../secret", "src/../../secret", "./a.txt", "src//pkg", "a\x00b", "a\nb"} {
		_, _, err := b.sbs.OpenFile(ctx, b.session, bad)
		require.ErrorIs(t, err, agent.ErrBadPath, "%q", bad)
	}
	for _, escape := range []string{"leak", "up/secret"} {
		_, _, err := b.sbs.OpenFile(ctx, b.session, escape)
		require.Error(t, err, "%q leaves the workspace", escape)
		require.False(t, errors.Is(err, agent.ErrBadPath))
	}
	_, _, err = b.sbs.OpenFile(ctx, b.session, "src")
	require.ErrorIs(t, err, fs.ErrNotExist, "a directory is no file")
	_, _, err = b.sbs.OpenFile(ctx, b.session, "nope.txt")
	require.ErrorIs(t, err, fs.ErrNotExist)

	// Killed: its workspace stays listed until the retention removes it.
	require.NoError(t, b.sbs.Kill(ctx, b.session))
	files, _, err = b.sbs.Files(ctx, b.session)
	require.NoError(t, err)
	require.Len(t, files, 2)

	// Another node's workspace is not this node's to list.
	nb := newJanitorBundle(t, st, &nodeB)
	_, _, err = nb.sbs.Files(ctx, b.session)
	require.ErrorIs(t, err, agent.ErrWorkspaceElsewhere)
}
