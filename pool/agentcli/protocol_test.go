package agentcli_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/pool/agentcli"
)

func TestParse(t *testing.T) {
	v := agentcli.StdoutVocabulary()
	tests := []struct {
		give string
		want error // nil, ErrUnknown or ErrUnparsed
		typ  string
	}{
		{give: `{"type":"system","subtype":"init","session_id":"s","tools":[]}`, typ: "system"},
		{give: `{"type":"result","subtype":"success","is_error":false,"result":null,"usage":{"input_tokens":1}}`, typ: "result"},
		{give: `{"type":"system","subtype":"hook_started","tools":"not a list"}`, typ: "system"},
		{give: `{"type":"tool_progress","usage":"odd"}`, typ: "tool_progress"},
		{give: `{"type":"keep_alive"}`, typ: "keep_alive"},
		{give: `{"type":"system","subtype":"brand_new"}`, want: agentcli.ErrUnknown, typ: "system"},
		{give: `{"type":"brand_new"}`, want: agentcli.ErrUnknown, typ: "brand_new"},
		{give: `{"type":"result","usage":"odd"}`, want: agentcli.ErrUnparsed},
		{give: `{"type":"system","subtype":"init","tools":"odd"}`, want: agentcli.ErrUnparsed},
		{give: `{"subtype":"init"}`, want: agentcli.ErrUnparsed},
		{give: `not json`, want: agentcli.ErrUnparsed},
		{give: `[1,2]`, want: agentcli.ErrUnparsed},
		{give: ``, want: agentcli.ErrUnparsed},
		{give: `{"type":"assistant"`, want: agentcli.ErrUnparsed},
	}
	for _, tt := range tests {
		m, err := agentcli.Parse([]byte(tt.give), v)
		if !errors.Is(err, tt.want) || tt.want == nil && err != nil {
			t.Errorf("Parse(%s) error %v, want %v", tt.give, err, tt.want)
			continue
		}
		if tt.typ != "" && (m == nil || m.Type != tt.typ) {
			t.Errorf("Parse(%s) = %+v, want type %s", tt.give, m, tt.typ)
		}
	}
	if _, err := agentcli.Parse([]byte(`{"type":"qoder_only"}`), v.With([]string{"qoder_only"}, nil)); err != nil {
		t.Errorf("a dialect's own type: %v", err)
	}
}

// FuzzParse: any line is parsed or refused with one of the two errors,
// never a panic, and a known message always has its type.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"type":"result","subtype":"success","usage":{"input_tokens":3}}`,
		`{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":"hi"}}}`,
		`{"type":"assistant","message":{"id":"m","role":"assistant","content":[{"type":"text","text":"x"}]},"error":"rate_limit"}`,
		`{"type":"control_response","response":{"subtype":"success","request_id":"1","response":{}}}`, `{]`, `"x"`} {
		f.Add([]byte(s))
	}
	v := agentcli.StdoutVocabulary()
	f.Fuzz(func(t *testing.T, line []byte) {
		m, err := agentcli.Parse(line, v)
		switch {
		case err == nil:
			if m == nil || m.Type == "" || !v.Knows(m) {
				t.Fatalf("Parse(%q) = %+v without an error", line, m)
			}
			if m.Message != nil {
				_ = m.Message.Text()
			}
		case errors.Is(err, agentcli.ErrUnknown):
			if m == nil || v.Knows(m) {
				t.Fatalf("Parse(%q): unknown, but %+v", line, m)
			}
		case !errors.Is(err, agentcli.ErrUnparsed):
			t.Fatalf("Parse(%q): %v, neither unknown nor unparsed", line, err)
		}
	})
}

// Lines outside the model, printed by a real process, are logged and
// counted, and the turn goes on.
func TestLinesOutsideTheModel(t *testing.T) {
	p := startPool(t, nil, account(t, "a1", "sk-test-key"))
	p.offModel = 2
	be := p.ready(t, "a1")
	r := mustOK(t, "turn", run(t, be, ask("hello [[sim:off-model]]", "")))
	if r.text != "You said: hello" {
		t.Errorf("answer %q", r.text)
	}
	st := p.drv.Stats()
	if st.Unknown.Load() != 1 || st.Unparsed.Load() != 1 {
		t.Errorf("unknown %d, unparsed %d; want one each", st.Unknown.Load(), st.Unparsed.Load())
	}
	if n := strings.Count(p.log.String(), "agent CLI printed a line outside the protocol model"); n != 2 {
		t.Errorf("%d warnings logged, want 2", n)
	}
}
