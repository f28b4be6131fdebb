package cli

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/ferry-outbox/ferry/activities"
	"github.com/ferry-outbox/ferry/cmd/ferry/app"
	"github.com/ferry-outbox/ferry/cmd/ferry/status"
	"github.com/ferry-outbox/ferry/outbox"
	"github.com/ferry-outbox/ferry/relaydb"
	"github.com/ferry-outbox/ferry/worker"
	"github.com/ferry-outbox/ferry/workflows"
)

// operatorCmds are the commands of an operator: see what is stuck, repair
// it, replay what a consumer lost, register what Temporal needs.
func operatorCmds(g *globals) []*cobra.Command {
	return []*cobra.Command{setupTemporalCmd(g), statusCmd(g), blockedCmd(g), eventCmd(g), repairCmd(g), replayCmd(g)}
}

func setupTemporalCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "setup-temporal",
		Short: "Register Ferry's search attributes on the Temporal namespace (idempotent)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel, cfg, logger, err := g.configWithin(cmd.Context(), 2)
			if err != nil {
				return err
			}
			defer cancel()
			c, err := cfg.DialTemporal(ctx, logger)
			if err != nil {
				return err
			}
			defer c.Close()
			added, err := worker.EnsureSearchAttributes(ctx, c, cfg.Namespace, true)
			if err != nil {
				return err
			}
			if len(added) == 0 {
				fmt.Fprintf(g.stdout, "namespace %q already has Ferry's search attributes: nothing to do\n", cfg.Namespace)
			} else {
				fmt.Fprintf(g.stdout, "registered on namespace %q: %s\n", cfg.Namespace, strings.Join(added, ", "))
			}
			return nil
		},
	}
}

// blockedRow is one line of `ferry blocked`.
type blockedRow struct {
	// WorkflowID is empty for a row no workflow holds (NoWorkflow).
	WorkflowID string    `json:"workflow_id"`
	NoWorkflow bool      `json:"no_workflow,omitempty"`
	EventID    string    `json:"event_id"`
	EventType  string    `json:"event_type"`
	ErrorClass string    `json:"error_class"`
	Since      time.Time `json:"since"`
	Aggregate  string    `json:"aggregate"`
	Version    int64     `json:"version"`
	LastError  string    `json:"last_error"`
	Retry      string    `json:"retry_command"`
	Skip       string    `json:"skip_command"`
}

func blockedCmd(g *globals) *cobra.Command {
	return reportCmd(g, "blocked", "List aggregates held at a quarantined event, with the commands that repair them", "print JSON",
		listBlocked, func(w io.Writer, cfg app.Config, rows []blockedRow) error {
			if len(rows) == 0 {
				fmt.Fprintf(w, "no blocked aggregates in namespace %q\n", cfg.Namespace)
				return nil
			}
			fmt.Fprintf(w, "%d blocked aggregate(s) in namespace %q:\n\n", len(rows), cfg.Namespace)
			for _, r := range rows {
				fmt.Fprintf(w, "%s  v%d  event %s (%s)\n", r.Aggregate, r.Version, r.EventID, r.EventType)
				if r.NoWorkflow {
					fmt.Fprintf(w, "  quarantined without a workflow, committed %s (%s ago), %s\n", r.Since.Format(time.RFC3339), time.Since(r.Since).Round(time.Second), r.ErrorClass)
				} else {
					fmt.Fprintf(w, "  blocked since %s (%s ago), %s, in workflow %s\n", r.Since.Format(time.RFC3339), time.Since(r.Since).Round(time.Second), r.ErrorClass, r.WorkflowID)
				}
				if r.LastError != "" {
					fmt.Fprintf(w, "  last error: %s\n", r.LastError)
				}
				fmt.Fprintf(w, "  after fixing the cause:  %s\n", r.Retry)
				fmt.Fprintf(w, "  to give the event up:    %s\n\n", r.Skip)
			}
			return nil
		})
}

func listBlocked(ctx context.Context, cfg app.Config, pool *pgxpool.Pool, c client.Client) ([]blockedRow, error) {
	red, err := cfg.Redactor()
	if err != nil {
		return nil, err
	}
	blocked, _, err := status.BlockedAggregates(ctx, c, cfg.Namespace, 0)
	if err != nil {
		return nil, err
	}
	// The blocked events' rows, in one query.
	ids := make([]string, len(blocked))
	for i, b := range blocked {
		ids[i] = b.EventID
	}
	events, err := relaydb.RowsByID(ctx, pool, ids)
	if err != nil {
		return nil, fmt.Errorf("load blocked events: %w", err)
	}
	out := make([]blockedRow, 0, len(blocked))
	for _, b := range blocked {
		r := blockedRow{WorkflowID: b.WorkflowID, EventID: b.EventID, EventType: b.EventType, ErrorClass: b.ErrorClass, Since: b.Since}
		e := events[strings.ToLower(b.EventID)]
		r.Aggregate, r.Version = aggregateName(e.AggregateType, e.AggregateID), e.Version
		if e.LastError != "" {
			r.LastError = redactLastError(red, e.AggregateType, r.EventType, e.Payload, e.LastError)
		}
		r.Retry = fmt.Sprintf("ferry repair %s --action retry --reason '…'", r.EventID)
		r.Skip = fmt.Sprintf("ferry repair %s --action skip --reason '…'", r.EventID)
		out = append(out, r)
	}
	// Quarantined rows no blocked workflow holds: Temporal refused their
	// start or signal, migration 0007 quarantined them, or their workflow
	// was terminated. `ferry repair` applies to them directly.
	held := make(map[string]bool, len(blocked))
	for _, b := range blocked {
		held[strings.ToLower(b.EventID)] = true
	}
	unheld, _, err := status.UnheldRows(ctx, pool, held, 0)
	if err != nil {
		return nil, err
	}
	for _, u := range unheld {
		r := blockedRow{NoWorkflow: true, EventID: u.EventID, EventType: u.EventType, ErrorClass: u.ErrorClass, Since: u.CreatedAt,
			Aggregate: u.Aggregate(), Version: u.Version}
		r.LastError = redactLastError(red, u.AggregateType, u.EventType, u.Payload, u.LastError)
		r.Retry = fmt.Sprintf("ferry repair %s --action retry --reason '…'", r.EventID)
		r.Skip = fmt.Sprintf("ferry repair %s --action skip --reason '…'", r.EventID)
		out = append(out, r)
	}
	return out, nil
}

func repairCmd(g *globals) *cobra.Command {
	var (
		action, reason, actor, payloadFile, requestID string
		schemaVersion                                 int
		viaSignal                                     bool
	)
	cmd := &cobra.Command{
		Use:   "repair EVENT_ID --action retry|skip|patch --reason TEXT",
		Short: "Repair a quarantined event: retry it, skip it, or patch its payload and retry",
		Long: `Finds the aggregate workflow of EVENT_ID and sends it a repair as a workflow
update, which is validated and answered at once. Every repair needs a reason,
is written to the append-only ferry_repairs table, and is applied once per
request id: running the same command again changes nothing (the default
request id is derived from the event, action, actor, reason and payload).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			req := workflows.RepairRequest{Action: action, EventID: args[0], Reason: reason, Actor: actor, SchemaVersion: schemaVersion}
			if _, err := uuid.Parse(req.EventID); err != nil {
				return fmt.Errorf("event id %q is not a UUID", req.EventID)
			}
			if payloadFile != "" {
				b, err := readPayload(payloadFile, cmd.InOrStdin())
				if err != nil {
					return err
				}
				if err := outbox.ValidatePayload(b, outbox.DefaultMaxPayloadBytes); err != nil {
					return fmt.Errorf("--payload-file %s: %w", payloadFile, err)
				}
				req.Payload = b
			}
			req.RequestID = cmp(requestID, defaultRequestID(req))
			cfg, pool, c, closeAll, err := g.connections(ctx)
			if err != nil {
				return err
			}
			defer closeAll()
			row, err := relaydb.RowByID(ctx, pool, req.EventID)
			if errors.Is(err, relaydb.ErrEventNotFound) {
				return fmt.Errorf("event %s is not in outbox_events", req.EventID)
			}
			if err != nil {
				return fmt.Errorf("look up event %s: %w", req.EventID, err)
			}
			aggType, aggID, eventType, status, version := row.AggregateType, row.AggregateID, row.EventType, row.Status, row.Version
			wfID := workflows.WorkflowID(aggType, aggID)
			// No running workflow: a quarantined row is repaired in place (a
			// repeated request answers with its audit row); anything else
			// is refused there, saying what the row is.
			if !heldByWorkflow(ctx, c, wfID) {
				res, err := activities.RepairUnheld(ctx, pool, req)
				if err != nil {
					red, _ := cfg.Redactor()
					return errors.New("refused: " + red.Text(aggType, eventType, req.Payload, err.Error()))
				}
				if res.Duplicate {
					fmt.Fprintf(g.stdout, "request %s was applied before (audit #%d): nothing done again\n", res.RequestID, res.AuditID)
					return nil
				}
				next := "it is marked skipped and the aggregate continues with the next version"
				if req.Action != workflows.ActionSkip {
					next = "it is pending again, with fresh attempts"
				}
				fmt.Fprintf(g.stdout, "%s of event %s (%s v%d, no workflow holds it) applied to the row, audit #%d: %s.\n",
					res.Action, res.EventID, aggregateName(aggType, aggID), res.Version, res.AuditID, next)
				return nil
			}
			if viaSignal {
				if err := c.SignalWorkflow(ctx, wfID, "", workflows.RepairSignal, req); err != nil {
					return fmt.Errorf("signal %s: %w", wfID, err)
				}
				fmt.Fprintf(g.stdout, "sent %s of %s/%s v%d as a signal (request %s); it is validated in the workflow: check `ferry blocked` or query %s\n",
					req.Action, aggType, aggID, version, req.RequestID, workflows.StateQuery)
				return nil
			}
			uctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			h, err := c.UpdateWorkflow(uctx, client.UpdateWorkflowOptions{
				WorkflowID: wfID, UpdateName: workflows.RepairUpdate, Args: []any{req},
				WaitForStage: client.WorkflowUpdateStageCompleted,
			})
			var res workflows.RepairResult
			if err == nil {
				err = h.Get(uctx, &res)
			}
			if err != nil {
				var notFound *serviceerror.NotFound
				if errors.As(err, &notFound) {
					return fmt.Errorf("refused: workflow %s is not running (event %s is %s): nothing is blocked there", wfID, req.EventID, status)
				}
				// The validator names fields, but a refusal may quote
				// the patch it refused.
				red, _ := cfg.Redactor()
				return errors.New("refused: " + red.Text(aggType, eventType, req.Payload, unwrapUpdateErr(err).Error()))
			}
			if res.Duplicate {
				fmt.Fprintf(g.stdout, "request %s was applied before (audit #%d): nothing done again\n", res.RequestID, res.AuditID)
				return nil
			}
			fmt.Fprintf(g.stdout, "%s of event %s (%s/%s v%d) accepted, audit #%d; the aggregate continues now.\n",
				res.Action, res.EventID, aggType, aggID, res.Version, res.AuditID)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&action, "action", "", "retry, skip or patch (required)")
	f.StringVar(&reason, "reason", "", "why, for the audit trail (required)")
	f.StringVar(&actor, "actor", currentUser(), "who asks (default: your user name)")
	f.StringVar(&payloadFile, "payload-file", "", "patch: file with the new JSON payload ('-' reads standard input)")
	f.IntVar(&schemaVersion, "schema-version", 0, "patch: the new schema version")
	f.StringVar(&requestID, "request-id", "", "idempotency key of this repair (default: derived from the request)")
	f.BoolVar(&viaSignal, "signal", false, "send as a signal instead of an update (no synchronous answer)")
	_ = cmd.MarkFlagRequired("action")
	_ = cmd.MarkFlagRequired("reason")
	return cmd
}

// aggregateName is "TYPE/ID" as `ferry blocked` prints it.
func aggregateName(aggType, aggID string) string {
	return status.Unheld{AggregateType: aggType, AggregateID: aggID}.Aggregate()
}

// heldByWorkflow says whether a running workflow may hold the aggregate's
// quarantined event, so the repair goes to it. A describe that fails for
// any other reason than NotFound counts as held, so the repair goes
// through Temporal and its error is what the operator reads. (wfID is
// printable ASCII whatever the id, workflows.WorkflowID: an id no workflow
// can have, one migration 0007 quarantined for a control character, is
// simply not found.)
func heldByWorkflow(ctx context.Context, c client.Client, wfID string) bool {
	d, err := c.DescribeWorkflowExecution(ctx, wfID, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return false
	}
	if err != nil {
		return true
	}
	return d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
}

func replayCmd(g *globals) *cobra.Command {
	var (
		eventIDs                        []string
		aggregate, reason, actor, reqID string
		fromVersion, toVersion          int64
		yes                             bool
	)
	cmd := &cobra.Command{
		Use:   "replay --event ID [--event ID…] | --aggregate TYPE/ID --from-version N --to-version M",
		Short: "Re-publish delivered events with their original message ids (audited)",
		Long: `Re-publishes already delivered events, chosen by their immutable event ids or
by a bounded version range of one aggregate (which prints the count and asks
to confirm). The messages keep their message id and trace context, so
consumers deduplicate them; each replay is audited in ferry_repairs. At most
1000 events per request.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if reason == "" {
				return errors.New("--reason is required: say why, for the audit trail")
			}
			if (len(eventIDs) == 0) == (aggregate == "") {
				return errors.New("choose events with --event (repeatable) or with --aggregate TYPE/ID and a version range")
			}
			cfg, pool, c, closeAll, err := g.connections(ctx)
			if err != nil {
				return err
			}
			defer closeAll()
			ids := eventIDs
			if aggregate != "" {
				aggType, aggID, ok := strings.Cut(aggregate, "/")
				if !ok || fromVersion < 1 || toVersion < fromVersion || toVersion-fromVersion >= workflows.MaxReplayEvents {
					return fmt.Errorf("--aggregate TYPE/ID with 1 <= --from-version <= --to-version, at most %d versions", workflows.MaxReplayEvents)
				}
				if ids, err = relaydb.PublishedIDs(ctx, pool, aggType, aggID, fromVersion, toVersion); err != nil {
					return err
				}
				if len(ids) == 0 {
					return fmt.Errorf("no published events of %s between v%d and v%d", aggregate, fromVersion, toVersion)
				}
				fmt.Fprintf(g.stdout, "%d published event(s) of %s, v%d to v%d, will be re-published.\n", len(ids), aggregate, fromVersion, toVersion)
				if !yes && !confirm(cmd.InOrStdin(), g.stdout) {
					return errors.New("not confirmed: nothing replayed")
				}
			}
			if len(ids) > workflows.MaxReplayEvents {
				return fmt.Errorf("%d events: a replay takes at most %d", len(ids), workflows.MaxReplayEvents)
			}
			for _, id := range ids {
				if _, err := uuid.Parse(id); err != nil {
					return fmt.Errorf("event id %q is not a UUID", id)
				}
			}
			reqID = cmp(reqID, uuid.NewString())
			run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.ReplayWorkflowID(reqID), TaskQueue: cfg.TaskQueue},
				workflows.ReplayWorkflowName, workflows.ReplayInput{RequestID: reqID, EventIDs: ids, Reason: reason, Actor: actor})
			if err != nil {
				return fmt.Errorf("start replay: %w", err)
			}
			fmt.Fprintf(g.stdout, "replaying %d event(s) as workflow %s (needs a running worker on task queue %s)…\n", len(ids), run.GetID(), cfg.TaskQueue)
			var res workflows.ReplayResult
			if err := run.Get(ctx, &res); err != nil {
				return fmt.Errorf("replay %s: %w", reqID, err)
			}
			fmt.Fprintf(g.stdout, "replayed %d event(s) with their original message ids; audited in ferry_repairs under request %s/<event id>\n", len(res.Replayed), reqID)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&eventIDs, "event", nil, "event id to replay (repeatable)")
	f.StringVar(&aggregate, "aggregate", "", "TYPE/ID of one aggregate, with --from-version and --to-version")
	f.Int64Var(&fromVersion, "from-version", 0, "first version to replay")
	f.Int64Var(&toVersion, "to-version", 0, "last version to replay")
	f.StringVar(&reason, "reason", "", "why, for the audit trail (required)")
	f.StringVar(&actor, "actor", currentUser(), "who asks (default: your user name)")
	f.StringVar(&reqID, "request-id", "", "idempotency key (default: a new UUID)")
	f.BoolVar(&yes, "yes", false, "do not ask to confirm a --aggregate selection")
	return cmd
}

func confirm(in io.Reader, out io.Writer) bool {
	fmt.Fprint(out, "Type yes to continue: ")
	line, _ := bufio.NewReader(in).ReadString('\n')
	return strings.TrimSpace(line) == "yes"
}

func readPayload(path string, stdin io.Reader) (json.RawMessage, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("read --payload-file: %w", err)
	}
	return json.RawMessage(strings.TrimSpace(string(b))), nil
}

// defaultRequestID derives the idempotency key from what the request says,
// so running the same command twice applies it once.
func defaultRequestID(r workflows.RepairRequest) string {
	h := sha256.New()
	for _, s := range []string{r.EventID, r.Action, r.Actor, r.Reason, string(r.Payload), fmt.Sprint(r.SchemaVersion)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return "cli-" + hex.EncodeToString(h.Sum(nil))[:32]
}

func currentUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return cmp(os.Getenv("USER"), "unknown")
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// unwrapUpdateErr keeps the validator's own message, which is what the
// operator needs to read.
func unwrapUpdateErr(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}
