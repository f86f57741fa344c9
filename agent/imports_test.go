package agent_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// What doc.go says agents may import of chatd is what they import: besides each other,
// conversation and chat, nothing (no store, queries, hub or transport). Tests may use more.
func TestAgentsImportOnlyConversationAndChat(t *testing.T) {
	t.Parallel()
	const module = "github.com/chatd/chatd/"
	allowed := func(path string) bool {
		switch {
		case !strings.HasPrefix(path, module):
			return true // the standard library and third parties
		case path == module+"agent", strings.HasPrefix(path, module+"agent/"):
			return true
		}
		return path == module+"conversation" || path == module+"chat"
	}
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		files++
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			require.NoError(t, err)
			require.True(t, allowed(p), "%s imports %s", path, p)
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, files, 10, "the walk found the agent packages")
}
