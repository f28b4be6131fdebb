package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/ferry-outbox/ferry"
	"github.com/ferry-outbox/ferry/cmd/ferry/app"
	"github.com/ferry-outbox/ferry/cmd/ferry/internal/settings"
	"github.com/ferry-outbox/ferry/redact"
	"github.com/ferry-outbox/ferry/relaydb"
	"github.com/ferry-outbox/ferry/repairdb"
	"github.com/ferry-outbox/ferry/workflows"
)

// eventView is what `ferry event` shows of one event, and its --json form.
// Payload, LastError, header values and audit reasons pass the redactor.
type eventView struct {
	EventID       string `json:"event_id"`
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	Version       int64  `json:"version"`
	EventType     string `json:"event_type"`
	SchemaVersion int32  `json:"schema_version"`
	Status        string `json:"status"`
	Attempts      int32  `json:"attempts"`
	// NextAttemptAt is when a pending row becomes claimable; set for
	// pending rows only (for others the column is a stale lease end).
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	ClaimedBy     string     `json:"claimed_by,omitempty"`
	LastError     string     `json:"last_error,omitempty"`
	// ErrorClass is the row's last_error_class: empty when the last error
	// has none, or there is no last error.
	ErrorClass   string            `json:"error_class,omitempty"`
	Headers      map[string]string `json:"headers,omitempty"`
	DeliverAfter *time.Time        `json:"deliver_after,omitempty"`
	CreatedAt    time.Time         `json:"created_at"`
	DispatchedAt *time.Time        `json:"dispatched_at,omitempty"`
	PublishedAt  *time.Time        `json:"published_at,omitempty"`
	TraceParent  string            `json:"trace_parent,omitempty"`
	// Payload is the stored JSON with sensitive fields masked; JSON null
	// once retention blanked it.
	Payload json.RawMessage `json:"payload"`
	// PayloadBytes and PayloadSHA256 are of the stored payload (its jsonb
	// text form, as the audit's digests are), before any masking.
	PayloadBytes  int    `json:"payload_bytes"`
	PayloadSHA256 string `json:"payload_sha256"`
	// AggregateDelivered is the aggregate's delivered_version (every
	// version up to it is published or skipped); AggregateLastVersion its
	// highest version written.
	AggregateDelivered   int64        `json:"aggregate_delivered_version"`
	AggregateLastVersion int64        `json:"aggregate_last_version"`
	Workflow             workflowView `json:"workflow"`
	// Audit is every repair and replay of the event (ferry_repairs),
	// oldest first: the latest maxAuditRows.
	Audit []auditView `json:"audit"`
	// Next says what happens to the event now, and what to do.
	Next []string `json:"next"`
}

// workflowView is the aggregate's workflow as Temporal describes it.
type workflowView struct {
	ID string `json:"id"`
	// Status of its latest run (Running, Completed, …); empty when Temporal
	// did not say (Error says why).
	Status string `json:"status,omitempty"`
	RunID  string `json:"run_id,omitempty"`
	// BlockedAt is the event id a running run is blocked at
	// (FerryBlockedEventId); empty when it is not blocked.
	BlockedAt string `json:"blocked_at,omitempty"`
	Error     string `json:"error,omitempty"`
	// none: Temporal answered that it has no run of the workflow.
	none bool
	// UIURL links the workflow in the Temporal UI when --temporal-ui-url
	// is set; DescribeCommand is the temporal CLI's command otherwise.
	UIURL           string `json:"ui_url,omitempty"`
	DescribeCommand string `json:"describe_command,omitempty"`
}

// auditView is one row of ferry_repairs.
type auditView struct {
	ID            int64     `json:"id"`
	At            time.Time `json:"at"`
	Action        string    `json:"action"`
	Actor         string    `json:"actor"`
	Reason        string    `json:"reason"`
	RequestID     string    `json:"request_id"`
	PayloadBefore string    `json:"payload_sha256_before"`
	PayloadAfter  string    `json:"payload_sha256_after"`
	SchemaBefore  int       `json:"schema_version_before"`
	SchemaAfter   int       `json:"schema_version_after"`
}

// maxAuditRows bounds the audit rows `ferry event` reads (a replayed event
// gains one per replay).
const maxAuditRows = 100

// maxPayloadText is how much of a payload the text form prints.
const maxPayloadText = 2000

func eventCmd(g *globals) *cobra.Command {
	var (
		aggregate string
		version   int64
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "event EVENT_ID | --aggregate TYPE/ID --version N",
		Short: "Show one event: its row, its error and class, its aggregate's workflow and every repair of it",
		Long: `Shows one outbox event, chosen by its id (the message_id consumers see) or
by its aggregate and version: status, attempts, next attempt, the last error
and its class, headers, deliver_after, when it was committed, dispatched and
published, the payload (sensitive fields masked, as ferry blocked masks them),
the aggregate's workflow with its state (a link into the Temporal UI with
--temporal-ui-url, the temporal CLI's command otherwise), the audit rows of
every repair and replay of it, and what happens to it next.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var pick func(context.Context, relaydb.Queryer) (relaydb.Detail, error)
			switch {
			case len(args) == 1 && aggregate == "":
				id := args[0]
				if _, err := uuid.Parse(id); err != nil {
					return fmt.Errorf("event id %q is not a UUID (or choose the event with --aggregate TYPE/ID --version N)", id)
				}
				pick = func(ctx context.Context, db relaydb.Queryer) (relaydb.Detail, error) {
					return relaydb.DetailByID(ctx, db, id)
				}
			case len(args) == 0 && aggregate != "":
				aggType, aggID, ok := strings.Cut(aggregate, "/")
				if !ok || aggType == "" || aggID == "" || version < 1 {
					return fmt.Errorf("--aggregate %q --version %d: want TYPE/ID (as ferry blocked prints it) and a version of at least 1", aggregate, version)
				}
				pick = func(ctx context.Context, db relaydb.Queryer) (relaydb.Detail, error) {
					return relaydb.DetailByVersion(ctx, db, aggType, aggID, version)
				}
			default:
				return errors.New("choose one event: ferry event EVENT_ID, or ferry event --aggregate TYPE/ID --version N")
			}
			v, err := g.inspectEvent(cmd.Context(), pick)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			}
			renderEvent(g.stdout, v, time.Now())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&aggregate, "aggregate", "", "TYPE/ID of the event's aggregate, with --version")
	f.Int64Var(&version, "version", 0, "the event's aggregate version, with --aggregate")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// inspectEvent reads the event pick chooses, its audit and its workflow.
// PostgreSQL must answer; Temporal need not: the row is what an operator
// came for, and the workflow part then says why it is missing.
func (g *globals) inspectEvent(ctx context.Context, pick func(context.Context, relaydb.Queryer) (relaydb.Detail, error)) (eventView, error) {
	cctx, cancel, cfg, logger, err := g.configWithin(ctx, 2)
	if err != nil {
		return eventView{}, err
	}
	defer cancel()
	red, err := cfg.Redactor()
	if err != nil {
		return eventView{}, err
	}
	pool, err := cfg.OpenPool(cctx)
	if err != nil {
		return eventView{}, err
	}
	defer pool.Close()
	d, err := pick(cctx, pool)
	if errors.Is(err, relaydb.ErrEventNotFound) {
		retention, _ := settings.ByName("retention")
		return eventView{}, fmt.Errorf("%w (delivered events are deleted after --retention, %s by default)", err, retention.DefaultString())
	}
	if err != nil {
		return eventView{}, err
	}
	audit, err := repairdb.AuditOf(cctx, pool, d.ID, maxAuditRows)
	if err != nil {
		return eventView{}, err
	}
	v := newEventView(red, d, audit)
	v.Workflow = describeWorkflow(cctx, cfg, logger, workflows.WorkflowID(d.AggregateType, d.AggregateID))
	v.Next = nextSteps(v, time.Now())
	return v, nil
}

// newEventView is the row and its audit with every text that may quote the
// payload masked.
func newEventView(red *redact.Redactor, d relaydb.Detail, audit []repairdb.AuditEntry) eventView {
	payload := []byte(d.Payload)
	sum := sha256.Sum256(payload)
	v := eventView{
		EventID: d.ID, AggregateType: d.AggregateType, AggregateID: d.AggregateID, Version: d.Version, EventType: d.EventType,
		SchemaVersion: d.SchemaVersion, Status: d.Status, Attempts: d.Attempts, ClaimedBy: d.ClaimedBy, ErrorClass: d.LastErrorClass,
		DeliverAfter: d.DeliverAfter, CreatedAt: d.CreatedAt, DispatchedAt: d.DispatchedAt, PublishedAt: d.PublishedAt,
		TraceParent: d.TraceParent, Payload: red.Payload(d.AggregateType, d.EventType, payload),
		PayloadBytes: len(payload), PayloadSHA256: hex.EncodeToString(sum[:]),
		AggregateDelivered: d.Delivered, AggregateLastVersion: d.LastVersion, Audit: []auditView{},
	}
	if d.Status == "pending" {
		v.NextAttemptAt = &d.NextAttemptAt
	}
	if d.LastError != "" {
		v.LastError = redactLastError(red, d.AggregateType, d.EventType, &d.Payload, d.LastError)
	}
	if len(d.Headers) > 0 {
		v.Headers = make(map[string]string, len(d.Headers))
		for k, val := range d.Headers {
			v.Headers[k] = redactHeader(red, d.AggregateType, d.EventType, payload, k, val)
		}
	}
	for _, a := range audit {
		v.Audit = append(v.Audit, auditView{ID: a.ID, At: a.At, Action: a.Action, Actor: a.Actor,
			Reason: red.Text(d.AggregateType, d.EventType, payload, a.Reason), RequestID: a.RequestID,
			PayloadBefore: a.PayloadSHA256Before, PayloadAfter: a.PayloadSHA256After,
			SchemaBefore: a.SchemaVersionBefore, SchemaAfter: a.SchemaVersionAfter})
	}
	return v
}

// redactHeader masks a header's value where it quotes a sensitive value
// of the payload, and wholly when the header is named like a sensitive
// field (its name=value fragment).
func redactHeader(red *redact.Redactor, aggType, eventType string, payload []byte, name, value string) string {
	if probe := name + "=value"; red.Text(aggType, eventType, nil, probe) != probe {
		return redact.Mask
	}
	return red.Text(aggType, eventType, payload, value)
}

// errNoRun is workflowView.Error when Temporal has no run of the workflow.
const errNoRun = "Temporal has no run of it: none started yet, or its runs closed longer ago than the namespace's retention"

// describeWorkflow says what Temporal knows of the aggregate's workflow:
// its latest run's status, and where to look further.
func describeWorkflow(ctx context.Context, cfg app.Config, logger *slog.Logger, wfID string) workflowView {
	w := workflowView{ID: wfID}
	if cfg.TemporalUIURL == "" {
		w.DescribeCommand = describeCommand(cfg, wfID)
	}
	c, err := cfg.DialTemporal(ctx, logger)
	if err != nil {
		// One line, naming the flags: it is printed beside the workflow ID.
		w.Error = strings.Join(strings.Fields(explain(err)), " ")
		w.UIURL = uiLink(cfg, wfID, "")
		return w
	}
	defer c.Close()
	d, err := c.DescribeWorkflowExecution(ctx, wfID, "")
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		w.Error, w.none = errNoRun, true
	case err != nil:
		w.Error = fmt.Sprintf("describe %s: %v", wfID, err)
	default:
		info := d.GetWorkflowExecutionInfo()
		w.Status, w.RunID = info.GetStatus().String(), info.GetExecution().GetRunId()
		if p := info.GetSearchAttributes().GetIndexedFields()[workflows.SABlockedEventID]; p != nil {
			var id string
			if converter.GetDefaultDataConverter().FromPayload(p, &id) == nil {
				w.BlockedAt = id
			}
		}
	}
	w.UIURL = uiLink(cfg, wfID, w.RunID)
	return w
}

// uiLink is the workflow's page in the Temporal UI: its run's history, or
// without a run the list of its runs; "" without --temporal-ui-url.
func uiLink(cfg app.Config, wfID, runID string) string {
	if cfg.TemporalUIURL == "" {
		return ""
	}
	base := cfg.TemporalUIURL + "/namespaces/" + url.PathEscape(cfg.Namespace) + "/workflows"
	if runID != "" {
		return base + "/" + url.PathEscape(wfID) + "/" + url.PathEscape(runID) + "/history"
	}
	return base + "?query=" + url.QueryEscape("WorkflowId = "+strconv.Quote(wfID))
}

// describeCommand is the temporal CLI's command for the workflow, with the
// address and namespace when they are not the CLI's defaults.
func describeCommand(cfg app.Config, wfID string) string {
	cmd := "temporal workflow describe --workflow-id " + shellQuote(wfID)
	if cfg.Temporal.Address != ferry.DefaultTemporalAddress {
		cmd += " --address " + shellQuote(cfg.Temporal.Address)
	}
	if cfg.Namespace != client.DefaultNamespace {
		cmd += " --namespace " + shellQuote(cfg.Namespace)
	}
	return cmd
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// nextSteps says what happens to the event now and what an operator can
// do, from its status.
func nextSteps(v eventView, now time.Time) []string {
	repair := func(action string) string {
		return fmt.Sprintf("ferry repair %s --action %s --reason '…'", v.EventID, action)
	}
	switch v.Status {
	case "published":
		return []string{"delivered: RabbitMQ confirmed it (or its workflow destinations took it); consumers deduplicate by its message_id",
			"to send it again with the same message id: ferry replay --event " + v.EventID + " --reason '…'"}
	case "skipped":
		return []string{"given up: it is never published; its aggregate went on past it (the audit says who skipped it and why)"}
	case "quarantined":
		steps := []string{"held for an operator: its aggregate waits at it while the others flow (ferry blocked lists every such event)",
			"after fixing the cause: " + repair("retry"),
			"to give it up:         " + repair("skip")}
		switch wf := v.Workflow; {
		case wf.Status == "Running" && wf.BlockedAt == v.EventID:
			steps = append(steps, "its workflow's run "+wf.RunID+" is blocked at it: ferry repair sends the repair there")
		case wf.Status != "" || wf.none:
			steps = append(steps, "no running workflow is blocked at it: ferry repair applies to the row directly")
		}
		return steps
	case "dispatched":
		since := ""
		if v.DispatchedAt != nil {
			since = " " + ago(now, *v.DispatchedAt) + " ago"
		}
		return []string{"Temporal has it (dispatched" + since + "): its aggregate's workflow publishes it in version order; the aggregate has delivered up to v" +
			strconv.FormatInt(v.AggregateDelivered, 10),
			"if it stays dispatched, look at the workflow; the reconciler re-dispatches rows dispatched over 10 minutes ago that no open run holds"}
	case "pending":
		switch {
		case v.DeliverAfter != nil && v.DeliverAfter.After(now):
			return []string{"delayed: not delivered before " + v.DeliverAfter.Format(time.RFC3339) + " (in " + ago(*v.DeliverAfter, now) + ")"}
		case strings.HasPrefix(v.LastError, workflows.HeldPrefix):
			return []string{"handed back by its blocked workflow: it is delivered once the event its aggregate waits at is repaired (ferry blocked)"}
		case v.NextAttemptAt != nil && v.NextAttemptAt.After(now):
			return []string{"waiting: a poller claims it again at " + v.NextAttemptAt.Format(time.RFC3339) + " (in " + ago(*v.NextAttemptAt, now) + ")"}
		}
		return []string{"due: a poller claims it at its next claim; if it stays pending, check that a poller runs (ferry status: backlog and its age)"}
	}
	return nil
}

// ago is to-from as a person reads it, rounded to the second.
func ago(to, from time.Time) string {
	return to.Sub(from).Round(time.Second).String()
}

// renderEvent writes the event for a person.
func renderEvent(w io.Writer, v eventView, now time.Time) {
	at := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.Format(time.RFC3339) + " (" + ago(now, *t) + " ago)"
	}
	line := func(label, format string, args ...any) {
		fmt.Fprintf(w, "  %-14s %s\n", label, fmt.Sprintf(format, args...))
	}
	fmt.Fprintf(w, "event %s: %s v%d, %s (schema v%d)\n", v.EventID, aggregateName(v.AggregateType, v.AggregateID), v.Version, v.EventType, v.SchemaVersion)
	line("status", "%s, %d claim(s) by a poller", v.Status, v.Attempts)
	if v.NextAttemptAt != nil {
		if v.NextAttemptAt.After(now) {
			line("next attempt", "%s (in %s)", v.NextAttemptAt.Format(time.RFC3339), ago(*v.NextAttemptAt, now))
		} else {
			line("next attempt", "due now")
		}
	}
	switch {
	case v.LastError == "":
		line("last error", "none")
	case v.ErrorClass == "":
		line("last error", "%s", v.LastError)
	default:
		line("last error", "%s: %s", v.ErrorClass, v.LastError)
	}
	line("committed", "%s", at(&v.CreatedAt))
	line("deliver after", "%s", at(v.DeliverAfter))
	line("dispatched", "%s", at(v.DispatchedAt))
	line("published", "%s", at(v.PublishedAt))
	if v.ClaimedBy != "" {
		line("claimed by", "%s", v.ClaimedBy)
	}
	if len(v.Headers) == 0 {
		line("headers", "none")
	} else {
		names := make([]string, 0, len(v.Headers))
		for k := range v.Headers {
			names = append(names, k)
		}
		slices.Sort(names)
		pairs := make([]string, len(names))
		for i, k := range names {
			pairs[i] = k + "=" + strconv.Quote(v.Headers[k])
		}
		line("headers", "%s", strings.Join(pairs, " "))
	}
	if v.TraceParent != "" {
		line("trace", "%s", v.TraceParent)
	}
	body := string(v.Payload)
	switch {
	case body == "null":
		body = "blanked by retention (--payload-retention)"
	case len(body) > maxPayloadText:
		body = body[:maxPayloadText] + fmt.Sprintf("… (%d more bytes; --json prints it whole)", len(body)-maxPayloadText)
	}
	line("payload", "%d bytes, sha256 %s", v.PayloadBytes, v.PayloadSHA256)
	fmt.Fprintf(w, "  %-14s %s\n", "", body)
	line("aggregate", "%s: delivered up to v%d, last version v%d", aggregateName(v.AggregateType, v.AggregateID), v.AggregateDelivered, v.AggregateLastVersion)

	wf := v.Workflow
	switch {
	case wf.Status != "" && wf.BlockedAt != "":
		line("workflow", "%s: %s (run %s), blocked at event %s", wf.ID, wf.Status, wf.RunID, wf.BlockedAt)
	case wf.Status != "":
		line("workflow", "%s: %s (run %s)", wf.ID, wf.Status, wf.RunID)
	default:
		line("workflow", "%s: %s", wf.ID, wf.Error)
	}
	if wf.UIURL != "" {
		fmt.Fprintf(w, "  %-14s %s\n", "", wf.UIURL)
	}
	if wf.DescribeCommand != "" {
		fmt.Fprintf(w, "  %-14s %s   (set --temporal-ui-url for a link)\n", "", wf.DescribeCommand)
	}

	if len(v.Audit) == 0 {
		line("audit", "no repair or replay of it")
	}
	for i, a := range v.Audit {
		label := ""
		if i == 0 {
			label = "audit"
		}
		payload := "payload unchanged"
		if a.PayloadBefore != a.PayloadAfter || a.SchemaBefore != a.SchemaAfter {
			payload = fmt.Sprintf("payload %.12s… → %.12s…, schema v%d → v%d", a.PayloadBefore, a.PayloadAfter, a.SchemaBefore, a.SchemaAfter)
			if a.PayloadAfter == v.PayloadSHA256 {
				payload += " (the payload now)"
			}
		}
		fmt.Fprintf(w, "  %-14s #%d %s %s by %s: %q (%s; request %s)\n", label, a.ID, a.At.Format(time.RFC3339), a.Action, a.Actor, a.Reason, payload, a.RequestID)
	}
	for i, n := range v.Next {
		label := ""
		if i == 0 {
			label = "next"
		}
		fmt.Fprintf(w, "  %-14s %s\n", label, n)
	}
}
