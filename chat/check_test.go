package chat_test

import (
	"strings"
	"testing"
	"unicode/utf8"

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

func TestCheckIDRefusesWhatPostgreSQLTextCannotHold(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"a", "chat-1", "é€😀", "\uFFFD", strings.Repeat("x", 1000)} {
		require.NoError(t, chat.CheckID(id), "%q", id)
	}
	for _, id := range []string{"\xff", "a\xffb", "\xc3", "\xed\xa0\x80" /* a surrogate */, "\xf4\x90\x80\x80" /* over U+10FFFF */} {
		require.ErrorIs(t, chat.CheckID(id), chat.ErrNotUTF8, "%q", id)
	}
	require.ErrorIs(t, chat.CheckID("a\x00b"), chat.ErrHasNUL)
	require.Equal(t, "the chat id is not valid UTF-8", "the chat id "+chat.CheckID("\xff").Error())

	require.NoError(t, chat.CheckJSONText([]byte(`{"id":"é","n":"\u0000"}`)))
	require.ErrorIs(t, chat.CheckJSONText([]byte("{\"id\":\"\xff\"}")), chat.ErrNotUTF8)
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

func TestSessionTitle(t *testing.T) {
	t.Parallel()
	require.Equal(t, "hello world", chat.SessionTitle("  hello \n\t world  "))
	exact := strings.Repeat("é", 80)
	require.Equal(t, exact, chat.SessionTitle(exact), "80 characters are not cut")
	long := strings.Repeat("日本", 50) // 100 characters, 300 bytes
	got := chat.SessionTitle(long)
	require.Equal(t, strings.Repeat("日本", 40)+"…", got, "cut after 80 characters, not bytes")
	require.True(t, utf8.ValidString(got))
}

func TestPreview(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a b", chat.Preview("a\n\nb", 120))
	require.Equal(t, "ab", chat.Preview("abc", 2))
	require.Equal(t, "a", chat.Preview("a b", 2), "no space where it was cut")
	require.Equal(t, strings.Repeat("x", 80)+"…", chat.SessionTitle(strings.Repeat("x", 80)+" more"))
	require.Equal(t, "", chat.Preview("", 2))
}

func TestCheckTitle(t *testing.T) {
	t.Parallel()
	got, err := chat.CheckTitle("  My trip  ")
	require.NoError(t, err)
	require.Equal(t, "My trip", got)
	_, err = chat.CheckTitle(strings.Repeat("x", chat.MaxTitleLen))
	require.NoError(t, err)
	for title, want := range map[string]string{
		"   ":                                   "empty",
		strings.Repeat("x", chat.MaxTitleLen+1): "longer than 200",
		"a\x00b":                                "NUL",
		"a\xffb":                                "UTF-8",
	} {
		_, err := chat.CheckTitle(title)
		require.ErrorContains(t, err, want)
	}
}

// CleanJSON keeps what jsonb takes byte for byte and turns what it refuses into U+FFFD,
// in strings and keys; CheckToolInput then accepts the result.
func TestCleanJSONMakesJSONStorable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{`{"signature":"abc"}`, `{"signature":"abc"}`},
		{`{"a": [1, 2.50, "x"] }`, `{"a": [1, 2.50, "x"] }`}, // spacing and numbers kept
		{`{"signature":"a\u0000b"}`, `{"signature":"a\ufffdb"}`},
		{`{"\u0000":"\u0000\u0000"}`, `{"\ufffd":"\ufffd\ufffd"}`},
		{`"lone \ud800 high"`, `"lone \ufffd high"`},
		{`"lone \udc00 low"`, `"lone \ufffd low"`},
		{`"pair \ud83d\ude00 kept"`, `"pair \ud83d\ude00 kept"`},
		{`"escaped \\u0000 is text"`, `"escaped \\u0000 is text"`},
		{`"quote \" then \u0000"`, `"quote \" then \ufffd"`},
		{`"é \u00e9"`, `"é \u00e9"`},
		{"\"bad \xff utf-8\"", "\"bad \uFFFD utf-8\""},
	} {
		got := chat.CleanJSON([]byte(c.in))
		require.Equal(t, c.want, string(got), "%s", c.in)
		require.NoError(t, chat.CheckToolInput(got), "%s", c.in)
	}
	require.Nil(t, chat.CleanJSON([]byte(`{"a":`)), "not JSON")
	require.Nil(t, chat.CleanJSON([]byte(`"\u00zz"`)), "not JSON")
}
