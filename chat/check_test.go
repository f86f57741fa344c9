package chat_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/chat"
)

func TestValidToolName(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"shell", "current_time", "get-weather", "A1", strings.Repeat("x", chat.MaxToolNameLen)} {
		require.True(t, chat.ValidToolName(name), "%q", name)
	}
	for _, name := range []string{
		"", "get weather", "shell;rm", "naïve", "a.b", "a/b", "tool\x00", strings.Repeat("x", chat.MaxToolNameLen+1),
		// A call id is not a tool name.
		"call_0193abc:1",
	} {
		require.False(t, chat.ValidToolName(name), "%q", name)
	}
}

func TestValidRequestIDCountsCharacters(t *testing.T) {
	t.Parallel()
	require.True(t, chat.ValidRequestID(strings.Repeat("é", chat.MaxRequestIDLen)), "128 characters of 2 bytes each")
	require.False(t, chat.ValidRequestID(strings.Repeat("a", chat.MaxRequestIDLen+1)))
	require.False(t, chat.ValidRequestID(""))
	require.False(t, chat.ValidRequestID("a\x00b"))
	require.False(t, chat.ValidRequestID("bad \xff"))
}

func TestCheckToolInputFollowsJSONB(t *testing.T) {
	t.Parallel()
	require.NoError(t, chat.CheckToolInput([]byte(`{"q":"x","n":[1,{"k":"é"}]}`)))
	require.ErrorContains(t, chat.CheckToolInput([]byte(`{"q":`)), "not JSON")
	require.ErrorContains(t, chat.CheckToolInput([]byte("{\"q\":\"\xff\"}")), "UTF-8")
	require.ErrorContains(t, chat.CheckToolInput([]byte(`{"q":["\u0000"]}`)), `\u0000`)
	require.ErrorContains(t, chat.CheckToolInput([]byte(`{"\u0000":1}`)), `\u0000`)
}

func TestCleanTextMakesTextStorable(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a\uFFFDb\uFFFD", chat.CleanText("a\x00b\xff"))
	require.Equal(t, "déjà vu", chat.CleanText("déjà vu"))
}
