package main

import (
	"context"
	"fmt"
	"sync"

	"go.temporal.io/sdk/temporal"

	"github.com/ferry-outbox/ferry/workflows"
)

// standIns replace package activities.
type standIns struct {
	mu       sync.Mutex
	poisoned map[string]bool    // event ids whose publish fails with a retryable "Unroutable"
	flaky    map[string]int     // event ids whose next regular attempts fail, and how many
	settings workflows.Settings // what the worker answers runs of Revision2
	// busyReleases: how many releases answer Busy (versions handed to the
	// run but not delivered) before one answers Released.
	busyReleases int
}

// release stands in for activities.ReleaseAggregate.
func (s *standIns) release(_ context.Context, in workflows.ReleaseInput) (workflows.ReleaseResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busyReleases > 0 {
		s.busyReleases--
		return workflows.ReleaseResult{Busy: true, Delivered: 3, HandedVersion: 4}, nil
	}
	return workflows.ReleaseResult{Released: true}, nil
}

func (s *standIns) poison(eventID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.poisoned[eventID] = true
}

func (s *standIns) heal(eventID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.poisoned, eventID)
}

// publish stands in for activities.PublishEvent.
func (s *standIns) publish(_ context.Context, in workflows.PublishInput) (workflows.PublishResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.flaky[in.EventID] > 0 {
		s.flaky[in.EventID]--
		return workflows.PublishResult{}, temporal.NewApplicationError(
			fmt.Sprintf("broker hiccup publishing %s (stand-in)", in.EventID), "BrokerUnavailable")
	}
	if s.poisoned[in.EventID] {
		return workflows.PublishResult{}, temporal.NewApplicationError(
			fmt.Sprintf("no binding routes event %s (stand-in)", in.EventID), "Unroutable")
	}
	return workflows.PublishResult{}, nil
}

// publishBatch stands in for activities.PublishBatch: the leading events
// that are neither poisoned nor flaky.
func (s *standIns) publishBatch(_ context.Context, in workflows.PublishBatchInput) (workflows.PublishBatchResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var res workflows.PublishBatchResult
	if in.Settings {
		st := s.settings.WithDefaults()
		res.Settings = &st
	}
	if in.LoadCursor {
		// Nothing delivered yet (as loadCursor): the run from version 1.
		var run []workflows.EventRef
		for _, ev := range in.Events {
			if ev.Version != int64(len(run))+1 {
				break
			}
			run = append(run, ev)
		}
		if len(run) == 0 {
			return res, nil
		}
		in.Events = run
	}
	if in.Settings {
		in.Events = in.Events[:min(len(in.Events), max(res.Settings.PublishBatchSize, 0))]
		if len(in.Events) == 0 {
			return res, nil
		}
	}
	for _, ev := range in.Events {
		if s.poisoned[ev.ID] || s.flaky[ev.ID] > 0 {
			res.Stopped = fmt.Sprintf("event %s did not publish (stand-in)", ev.ID)
			break
		}
		res.Published++
	}
	if res.Published == 0 {
		return res, temporal.NewApplicationError(res.Stopped, "BrokerUnavailable")
	}
	return res, nil
}

// loadCursor stands in for activities.LoadAggregateCursor: nothing
// delivered yet, and the settings when asked.
func (s *standIns) loadCursor(_ context.Context, in workflows.CursorInput) (workflows.CursorResult, error) {
	var res workflows.CursorResult
	if in.Settings {
		s.mu.Lock()
		st := s.settings.WithDefaults()
		s.mu.Unlock()
		res.Settings = &st
	}
	return res, nil
}

// quarantine stands in for activities.QuarantineEvent.
func quarantine(context.Context, workflows.QuarantineInput) error { return nil }

// repair stands in for activities.ApplyRepair: the first audit row.
func repair(_ context.Context, in workflows.RepairInput) (workflows.RepairResult, error) {
	return workflows.RepairResult{
		RequestID: in.Request.RequestID, Action: in.Request.Action, EventID: in.Request.EventID,
		Version: in.Version, AuditID: 1,
	}, nil
}

type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(string, ...any)  {}
func (quiet) Error(string, ...any) {}
