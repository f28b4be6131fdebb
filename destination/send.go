package destination

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
)

// SenderConfig configures a Sender.
type SenderConfig struct {
	// Temporal is the client destinations are reached with. Required.
	Temporal client.Client
	// Namespace of the destination workflows: the client's. Required.
	Namespace string
	// Identity recorded on starts and signals. Default "ferry".
	Identity string
	// DataConverter encodes the envelope and the memo: the one Temporal
	// was dialled with (a payload codec's, when Ferry encrypts what it
	// writes into Temporal), since the workflow API is called directly,
	// past the client's own converter. Default: Temporal's default
	// (json/plain).
	DataConverter converter.DataConverter
}

// Sender delivers envelopes to workflows. Safe for concurrent use.
type Sender struct {
	svc       workflowservice.WorkflowServiceClient
	namespace string
	identity  string
	dc        converter.DataConverter
}

// NewSender validates cfg.
func NewSender(cfg SenderConfig) (*Sender, error) {
	switch {
	case cfg.Temporal == nil:
		return nil, errors.New("destination: SenderConfig.Temporal is nil")
	case cfg.Namespace == "":
		return nil, errors.New("destination: SenderConfig.Namespace is empty")
	}
	if cfg.Identity == "" {
		cfg.Identity = "ferry"
	}
	if cfg.DataConverter == nil {
		cfg.DataConverter = converter.GetDefaultDataConverter()
	}
	return &Sender{svc: cfg.Temporal.WorkflowService(), namespace: cfg.Namespace, identity: cfg.Identity,
		dc: cfg.DataConverter}, nil
}

// Outcome is what a delivery found.
type Outcome string

const (
	// Delivered: the workflow was started or signalled.
	Delivered Outcome = "delivered"
	// Existed: a start found the workflow there already (running or
	// closed), started by another request: another event whose ID template
	// gives the same ID, or this one before the workflow closed. Nothing
	// was done. (A repeat of the very request that started it gets that
	// request's answer, Delivered, and starts nothing either.)
	Existed Outcome = "existed"
	// Repeated: a signal found its workflow closed, and a run the last
	// one continued as new from had recorded this very signal: a repeat of
	// a delivery that had succeeded. Nothing was done. (A repeat to a
	// closed run that took it is answered by the server itself: Delivered.)
	Repeated Outcome = "repeated"
)

// maxRunsLooked bounds how many runs of a closed workflow (the last, then
// the ones it continued as new from) a signal that found it closed looks
// through for its own request id.
const maxRunsLooked = 10

// Deliver sends ev to the route's workflow. The workflow API is called
// directly, not through the SDK's client methods, so that the request id
// is a function of the event and the destination: the Temporal server
// drops a signal whose request id the run has seen, and answers a repeated
// start with the run it started. Errors wrapping ErrPermanent cannot
// succeed on retry; a *serviceerror.NotFound from a signal means the
// workflow is not running (yet).
func (s *Sender) Deliver(ctx context.Context, rt Route, ev Envelope) (Outcome, error) {
	ev.EnvelopeVersion = EnvelopeVersion
	ev.Destination = rt.Name
	id, err := rt.RenderID(ev)
	if err != nil {
		return "", err
	}
	input, err := s.dc.ToPayloads(ev)
	if err != nil {
		return "", fmt.Errorf("%w: encode the envelope: %v", ErrPermanent, err)
	}
	requestID := RequestID(ev.EventID, rt.Name)
	var memo *commonpb.Memo // only a started workflow keeps one
	if rt.Action != Signal {
		if memo, err = s.memo(ev); err != nil {
			return "", err
		}
	}
	switch rt.Action {
	case Start:
		var resp *workflowservice.StartWorkflowExecutionResponse
		resp, err = s.svc.StartWorkflowExecution(ctx, &workflowservice.StartWorkflowExecutionRequest{
			Namespace:    s.namespace,
			WorkflowId:   id,
			WorkflowType: &commonpb.WorkflowType{Name: rt.WorkflowType},
			TaskQueue:    &taskqueuepb.TaskQueue{Name: rt.TaskQueue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
			Input:        input,
			Identity:     s.identity,
			RequestId:    requestID,
			Memo:         memo,
			// A closed workflow of this ID handled the event (or its ID's
			// owner chose so): never run it again. A running one is used.
			WorkflowIdReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
			WorkflowIdConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		})
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		if errors.As(err, &started) || err == nil && !resp.GetStarted() {
			return Existed, nil
		}
	case Signal:
		_, err = s.svc.SignalWorkflowExecution(ctx, &workflowservice.SignalWorkflowExecutionRequest{
			Namespace:         s.namespace,
			WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: id},
			SignalName:        rt.Signal,
			Input:             input,
			Identity:          s.identity,
			RequestId:         requestID,
		})
		var notFound *serviceerror.NotFound
		if errors.As(err, &notFound) {
			// Took this signal, then continued as new, and the last run
			// closed? (A closed run that took it answers a repeat as
			// done by itself.) Then this is a repeat, not a failure.
			if seen, lookErr := s.signalledBefore(ctx, id, requestID); lookErr == nil && seen {
				return Repeated, nil
			}
		}
	case SignalWithStart:
		_, err = s.svc.SignalWithStartWorkflowExecution(ctx, &workflowservice.SignalWithStartWorkflowExecutionRequest{
			Namespace:    s.namespace,
			WorkflowId:   id,
			WorkflowType: &commonpb.WorkflowType{Name: rt.WorkflowType},
			TaskQueue:    &taskqueuepb.TaskQueue{Name: rt.TaskQueue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
			SignalName:   rt.Signal,
			SignalInput:  input,
			Identity:     s.identity,
			RequestId:    requestID,
			Memo:         memo,
			// The usual signal-with-start: a closed workflow of this ID is
			// started again.
			WorkflowIdReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
			WorkflowIdConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		})
	default:
		return "", fmt.Errorf("%w: unknown action %q", ErrPermanent, rt.Action)
	}
	if err != nil {
		return "", classify(rt, id, err)
	}
	return Delivered, nil
}

// signalledBefore reports whether the last run of workflow id, or one of
// the runs it continued as new from (up to maxRunsLooked), recorded a
// signal with requestID. The server records the request id of every
// signal in its history event.
func (s *Sender) signalledBefore(ctx context.Context, id, requestID string) (bool, error) {
	runID := "" // the last run
	for range maxRunsLooked {
		var (
			token []byte
			prev  string
		)
		for {
			resp, err := s.svc.GetWorkflowExecutionHistory(ctx, &workflowservice.GetWorkflowExecutionHistoryRequest{
				Namespace: s.namespace, Execution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: runID}, NextPageToken: token,
			})
			if err != nil {
				return false, err
			}
			for _, ev := range resp.GetHistory().GetEvents() {
				if a := ev.GetWorkflowExecutionStartedEventAttributes(); a != nil {
					prev = a.GetContinuedExecutionRunId()
				}
				if a := ev.GetWorkflowExecutionSignaledEventAttributes(); a != nil && a.GetRequestId() == requestID {
					return true, nil
				}
			}
			if token = resp.GetNextPageToken(); len(token) == 0 {
				break
			}
		}
		if prev == "" {
			return false, nil
		}
		runID = prev
	}
	return false, nil
}

// memo marks a workflow Ferry started with the event that started it.
func (s *Sender) memo(ev Envelope) (*commonpb.Memo, error) {
	fields := map[string]*commonpb.Payload{}
	for k, v := range map[string]string{"ferry.event_id": ev.EventID, "ferry.aggregate": ev.Aggregate()} {
		p, err := s.dc.ToPayload(v)
		if err != nil {
			return nil, fmt.Errorf("%w: encode memo: %v", ErrPermanent, err)
		}
		fields[k] = p
	}
	return &commonpb.Memo{Fields: fields}, nil
}

// classify names the destination in the error and marks the refusals no
// retry can change as ErrPermanent.
func classify(rt Route, id string, err error) error {
	var (
		invalid    *serviceerror.InvalidArgument
		notFound   *serviceerror.NotFound
		nsNotFound *serviceerror.NamespaceNotFound
	)
	switch {
	case errors.As(err, &nsNotFound):
		return fmt.Errorf("destination %s: %s workflow %q: %w", rt.Name, rt.Action, id, err)
	case errors.As(err, &notFound) && rt.Action == Signal:
		return fmt.Errorf("destination %s: signal %q to workflow %q: no such running workflow (not started yet, or closed before it took this event): %w", rt.Name, rt.Signal, id, err)
	case errors.As(err, &invalid):
		return fmt.Errorf("%w: destination %s: %s workflow %q: Temporal refused the request: %v", ErrPermanent, rt.Name, rt.Action, id, err)
	}
	return fmt.Errorf("destination %s: %s workflow %q: %w", rt.Name, rt.Action, id, err)
}

// RequestID is the request id of an event's delivery to a destination: a
// name-based UUID of the event id and the destination's name, so every
// repeat of the delivery carries the same one.
func RequestID(eventID, destination string) string {
	return uuid.NewSHA1(requestSpace, []byte(eventID+"/"+destination)).String()
}

// requestSpace is the UUID namespace of RequestID (a random constant).
var requestSpace = uuid.MustParse("4c1f8a44-2b0e-4d5e-9a57-0f3c6d2e8b19")
