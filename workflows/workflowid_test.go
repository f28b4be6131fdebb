package workflows_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/workflows"
)

// legacyWorkflowID is the aggregate workflow ID before ids outside ASCII
// were deliverable: every printable-ASCII id must keep it.
func legacyWorkflowID(aggType, aggID string) string {
	return "ferry/" + aggType + "/" + aggID
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func TestWorkflowID(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		aggType, aggID, want string
	}{
		{"order", "42", "ferry/order/42"},
		// Printable ASCII is kept as it is, '~', '%' and '/' included.
		{"order", "o'42 ~%/x", "ferry/order/o'42 ~%/x"},
		// What an escape looks like, as an ASCII id: kept, and not müller's.
		{"customer", "m~C3~BCller", "ferry/customer/m~C3~BCller"},
		{"customer", "müller", "ferry/customer~/m~C3~BCller"},
		{"customer", "müller~1", "ferry/customer~/m~C3~BCller~7E1"},
		{"product", "製品-7", "ferry/product~/~E8~A3~BD~E5~93~81-7"},
		{"ticket", "🎫", "ferry/ticket~/~F0~9F~8E~AB"},
		// Total: a control character or invalid UTF-8 (which Validate
		// refuses) still gives printable ASCII.
		{"order", "a\x01b", "ferry/order~/a~01b"},
		{"order", "\xff", "ferry/order~/~FF"},
	} {
		got := workflows.WorkflowID(tt.aggType, tt.aggID)
		require.Equal(t, tt.want, got, "%s/%q", tt.aggType, tt.aggID)
		typ, id, ok := workflows.ParseWorkflowID(got)
		require.True(t, ok, got)
		require.Equal(t, tt.aggType, typ)
		require.Equal(t, tt.aggID, id)
	}
}

// The longest ID: a 100-byte type and a 200-byte id of bytes that all need
// an escape is MaxWorkflowIDBytes, under Temporal's default
// limit.maxIDLength of 1000 bytes.
func TestWorkflowIDLengthIsBounded(t *testing.T) {
	t.Parallel()
	typ := strings.Repeat("t", 100)
	for _, id := range []string{
		strings.Repeat("ü", 100),       // 2-byte characters
		strings.Repeat("製", 66) + "~~", // 3-byte characters
		strings.Repeat("🎫", 50),        // 4-byte characters
		"ü" + strings.Repeat("~", 198), // the mark itself, in an escaped id
	} {
		require.Equal(t, 200, len(id))
		require.Len(t, workflows.WorkflowID(typ, id), workflows.MaxWorkflowIDBytes, "%q", id)
	}
	require.Equal(t, 708, workflows.MaxWorkflowIDBytes)
	require.Less(t, workflows.MaxWorkflowIDBytes, 1000)
}

// ParseWorkflowID accepts only what WorkflowID writes, so no two IDs name
// the same aggregate.
func TestParseWorkflowIDRefusesOtherForms(t *testing.T) {
	t.Parallel()
	for _, id := range []string{
		"",
		"ferry/order",                               // no id segment
		"ferry/order/",                              // empty id
		"ferry//42",                                 // empty type
		"ferry-effect/charge/0193/x",                // another prefix
		"ferry/ord er/42",                           // a type outside the alphabet
		"ferry/order~/42",                           // escaped form of an ASCII id
		"ferry/order~/m~c3~bcller",                  // lower-case hex
		"ferry/order~/m~C3~BCller~",                 // a cut escape
		"ferry/order~/m~C3~BCller~7",                // a cut escape
		"ferry/order~/m~C3~BCller~41",               // 'A' needs no escape
		"ferry/order~/m~C3~BCller~G1",               // not hex
		"ferry/order~/m\xc3\xbcller",                // an unescaped byte outside ASCII
		"ferry/order/m\xc3\xbcller",                 // the same in the plain form
		"ferry/order~~/m~C3~BCller",                 // two marks
		"ferry/" + strings.Repeat("t", 101) + "/42", // type over 100 bytes
	} {
		_, _, ok := workflows.ParseWorkflowID(id)
		require.False(t, ok, "%q", id)
	}
}

// randomID draws an id from bytes and runes chosen to hit the edges: the
// mark, '/', '%', controls, invalid UTF-8, and characters of 2-4 bytes.
func randomID(r *rand.Rand) string {
	alphabet := []string{"a", "Z", "0", " ", "~", "/", "%", "-", "\x00", "\x01", "\x7f", "\x80", "\xff", "\xc3",
		"ü", "é", "\u0085", "\u00a0", "製", "品", "\u200b", "\u202e", "\ufffd", "🎫", "\U0010fffd"}
	var b strings.Builder
	for n := 1 + r.IntN(12); n > 0; n-- {
		b.WriteString(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}

// Property: over many random ids, WorkflowID is printable ASCII, keeps
// every printable-ASCII id's legacy ID, marks every other one in the type
// segment, and is injective (ParseWorkflowID recovers the id, and no two
// distinct ids of the sample share an ID).
func TestWorkflowIDProperties(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	seen := map[string]string{}
	for range 200_000 {
		id := randomID(r)
		if r.IntN(4) == 0 {
			id = strings.Map(func(c rune) rune { // a printable-ASCII id, escapes spelled out
				if c < 0x20 || c > 0x7e {
					return '~'
				}
				return c
			}, id)
		}
		checkWorkflowID(t, "order", id)
		wf := workflows.WorkflowID("order", id)
		if other, dup := seen[wf]; dup {
			require.Equal(t, other, id, "two ids share the workflow ID %q", wf)
		}
		seen[wf] = id
	}
}

func checkWorkflowID(t *testing.T, aggType, aggID string) {
	t.Helper()
	wf := workflows.WorkflowID(aggType, aggID)
	require.True(t, printableASCII(wf), "%q gives %q", aggID, wf)
	typeSegment, _, _ := strings.Cut(strings.TrimPrefix(wf, "ferry/"), "/")
	if printableASCII(aggID) {
		require.Equal(t, legacyWorkflowID(aggType, aggID), wf)
		require.Equal(t, aggType, typeSegment)
	} else {
		require.Equal(t, aggType+"~", typeSegment, "the mark stands in the type segment")
	}
	typ, id, ok := workflows.ParseWorkflowID(wf)
	require.True(t, ok, "%q", wf)
	require.Equal(t, aggType, typ)
	require.Equal(t, aggID, id, "injective: the id comes back")
	if len(aggType) <= 100 && len(aggID) <= 200 {
		require.LessOrEqual(t, len(wf), workflows.MaxWorkflowIDBytes)
	}
}

// FuzzWorkflowID checks the same properties on ids the fuzzer makes up,
// and that an ID ParseWorkflowID accepts is exactly what WorkflowID gives
// for what it parsed (so two different IDs never name one aggregate).
// `go test -fuzz FuzzWorkflowID ./workflows/` explores; plain `go test`
// runs the seeds.
func FuzzWorkflowID(f *testing.F) {
	for _, s := range []string{"42", "müller", "m~C3~BCller", "製品", "🎫", "a\x01b", "\xff", "~", "/", "ferry/order~/x"} {
		f.Add("order", s)
	}
	f.Fuzz(func(t *testing.T, aggType, aggID string) {
		if validType(aggType) && aggID != "" { // Validate refuses an empty id
			checkWorkflowID(t, aggType, aggID)
		}
		// Any string offered as an ID: accepted only in WorkflowID's form.
		for _, id := range []string{aggID, "ferry/" + aggType + "/" + aggID, "ferry/" + aggType + "~/" + aggID} {
			if typ, parsed, ok := workflows.ParseWorkflowID(id); ok {
				require.Equal(t, id, workflows.WorkflowID(typ, parsed))
				require.True(t, validType(typ))
			}
		}
	})
}

func validType(s string) bool {
	if s == "" || len(s) > 100 {
		return false
	}
	for _, c := range s {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}
