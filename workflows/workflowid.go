package workflows

import "strings"

// The aggregate workflow's ID, and its inverse.
//
// The Temporal Go SDK sends a workflow ID in the gRPC header
// temporal-resource-id, and gRPC refuses any byte outside printable ASCII
// (0x20-0x7E) there, so an ID with another byte could never be started or
// signalled. An aggregate id of printable ASCII is used as it is; any other
// is escaped:
//
//	ferry/<aggregate_type>/<aggregate_id>       every byte of the id in 0x20-0x7E
//	ferry/<aggregate_type>~/<escaped id>        any other id
//
// The escaped id is the id's UTF-8 with every byte outside 0x20-0x7E, and
// every '~', written as '~' and two upper-case hex digits ("müller" is
// "m~C3~BCller"). The mark '~' stands in the type segment, whose alphabet
// ([A-Za-z0-9_.-], outbox.Validate and the schema's
// outbox_events_aggregate_type_check) has no '~' and no '/': the segment
// between "ferry/" and the next '/' of an ID of the first form can never
// end in '~', so no ID of one form equals one of the other, whatever the
// ids. Within each form the id is recovered exactly (ParseWorkflowID), so
// WorkflowID is injective, and every printable-ASCII id keeps the ID it
// always had.
//
// Length: an aggregate id is at most 200 bytes of UTF-8 (outbox.Validate,
// outbox_events_aggregate_id_bytes), and escaping turns one byte into at
// most three, so the longest ID is len("ferry/") + 100 + len("~/") + 3*200
// = 708 bytes (MaxWorkflowIDBytes), under Temporal's limit.maxIDLength
// (1000 bytes by default). An id counted in characters could not be
// bounded this way: 200 characters of four bytes each escape to 2,400.

// MaxWorkflowIDBytes is the longest aggregate workflow ID WorkflowID
// returns for a valid aggregate (a type of at most 100 bytes, an id of at
// most 200 bytes).
const MaxWorkflowIDBytes = len("ferry/") + 100 + len("~/") + 3*200

// escapeMark ends the type segment of an escaped ID and starts each escape
// in its id segment.
const escapeMark = '~'

const upperHex = "0123456789ABCDEF"

// WorkflowID is the aggregate workflow's ID: a pure function of the
// aggregate, so every poller signals the same workflow for it. It is
// printable ASCII whatever the id (see the comment at the top of this
// file); outbox.Validate decides which ids are valid.
func WorkflowID(aggregateType, aggregateID string) string {
	if plainASCII(aggregateID) {
		return "ferry/" + aggregateType + "/" + aggregateID
	}
	var b strings.Builder
	b.Grow(len("ferry/") + len(aggregateType) + len("~/") + 3*len(aggregateID))
	b.WriteString("ferry/")
	b.WriteString(aggregateType)
	b.WriteByte(escapeMark)
	b.WriteByte('/')
	for i := 0; i < len(aggregateID); i++ {
		c := aggregateID[i]
		if needsEscape(c) {
			b.WriteByte(escapeMark)
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&0x0f])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// ParseWorkflowID is WorkflowID's inverse: the aggregate whose workflow
// has the ID id. ok is false when id is no aggregate workflow's ID (another
// prefix, a type segment outside [A-Za-z0-9_.-]{1,100}, an empty id, or an
// escaped form WorkflowID never writes, such as a lower-case hex digit or
// an escaped id of printable ASCII only).
func ParseWorkflowID(id string) (aggregateType, aggregateID string, ok bool) {
	rest, found := strings.CutPrefix(id, "ferry/")
	if !found {
		return "", "", false
	}
	typ, aggID, found := strings.Cut(rest, "/")
	if !found || aggID == "" {
		return "", "", false
	}
	escaped := strings.HasSuffix(typ, string(escapeMark))
	if escaped {
		typ = typ[:len(typ)-1]
	}
	if !validTypeSegment(typ) {
		return "", "", false
	}
	if escaped {
		var b strings.Builder
		for i := 0; i < len(aggID); i++ {
			c := aggID[i]
			if c != escapeMark {
				b.WriteByte(c)
				continue
			}
			if i+2 >= len(aggID) {
				return "", "", false
			}
			hi, lo := strings.IndexByte(upperHex, aggID[i+1]), strings.IndexByte(upperHex, aggID[i+2])
			if hi < 0 || lo < 0 {
				return "", "", false
			}
			b.WriteByte(byte(hi<<4 | lo))
			i += 2
		}
		aggID = b.String()
	}
	// Only the form WorkflowID writes: anything else (an escape of a byte
	// that needs none, an unescaped '~' or a byte outside printable ASCII
	// in the id segment) would let two IDs name one aggregate.
	if WorkflowID(typ, aggID) != id {
		return "", "", false
	}
	return typ, aggID, true
}

// plainASCII: every byte of s is printable ASCII, so s goes into a
// workflow ID as it is.
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// needsEscape: a byte the escaped form writes as "~XX".
func needsEscape(c byte) bool {
	return c < 0x20 || c > 0x7e || c == escapeMark
}

// validTypeSegment is outbox's aggregate type pattern, [A-Za-z0-9_.-]{1,100}.
func validTypeSegment(s string) bool {
	if len(s) == 0 || len(s) > 100 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}
