package devserver

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/log/tag"
	"go.uber.org/zap/zapcore"
)

// FatalError is a fatal error the Temporal server reported (a listener it
// could not bind, a connection it could not make). Unwrap gives the cause
// when the server passed one, so errors.Is(err, syscall.EADDRINUSE) tells
// a taken port.
type FatalError struct {
	Msg   string
	Attrs []string // "key=value"
	Cause error
}

func (e *FatalError) Error() string {
	return "Temporal server: " + e.Msg + " (" + strings.Join(e.Attrs, ", ") + ")"
}

func (e *FatalError) Unwrap() error { return e.Cause }

// fatalWatch is shared by a server's loggers: the first fatal error, and a
// channel closed when it happens.
type fatalWatch struct {
	once    sync.Once
	err     error
	failed  chan struct{}
	started atomic.Bool // Start returned the server
}

func newFatalWatch() *fatalWatch { return &fatalWatch{failed: make(chan struct{})} }

func (w *fatalWatch) report(err error) {
	w.once.Do(func() {
		w.err = err
		close(w.failed)
	})
}

// fatalLogger passes everything to the logger it wraps except Fatal: the
// server's loggers end the process on Fatal (zap) or ignore it (the no-op
// logger, after which the server carries on with a nil listener and dies of
// a nil pointer far away). Here Fatal is logged at error level and, while
// the server starts, reported to the watch and raised as a panic with the
// *FatalError, which Start recovers on the goroutine that builds and starts
// the server and returns. Once Start returned, a Fatal is logged and written
// to stderr, and the server carries on: after a restart on the same
// database one came about a minute in (the killed process's cluster
// membership timing out), and ending the process there turned a hiccup the
// server recovers from into an outage (the fault suite's Temporal restart).
type fatalLogger struct {
	inner log.Logger
	watch *fatalWatch
}

func (l *fatalLogger) Debug(msg string, tags ...tag.Tag)  { l.inner.Debug(msg, tags...) }
func (l *fatalLogger) Info(msg string, tags ...tag.Tag)   { l.inner.Info(msg, tags...) }
func (l *fatalLogger) Warn(msg string, tags ...tag.Tag)   { l.inner.Warn(msg, tags...) }
func (l *fatalLogger) Error(msg string, tags ...tag.Tag)  { l.inner.Error(msg, tags...) }
func (l *fatalLogger) DPanic(msg string, tags ...tag.Tag) { l.inner.DPanic(msg, tags...) }
func (l *fatalLogger) Panic(msg string, tags ...tag.Tag)  { l.inner.Panic(msg, tags...) }

func (l *fatalLogger) Fatal(msg string, tags ...tag.Tag) {
	l.inner.Error(msg, tags...)
	err := fatalError(msg, tags)
	if l.watch.started.Load() {
		fmt.Fprintf(os.Stderr, "devserver: %v; carrying on\n", err)
		return
	}
	l.watch.report(err)
	// What follows a Fatal in the server assumes the process is gone (a nil
	// listener, a half-built channel): it must not run.
	panic(err)
}

// With and Skip keep the wrapper around loggers derived from this one.
func (l *fatalLogger) With(tags ...tag.Tag) log.Logger {
	return &fatalLogger{inner: log.With(l.inner, tags...), watch: l.watch}
}

func (l *fatalLogger) Skip(extraSkip int) log.Logger {
	inner := l.inner
	if s, ok := inner.(log.SkipLogger); ok {
		inner = s.Skip(extraSkip)
	}
	return &fatalLogger{inner: inner, watch: l.watch}
}

func fatalError(msg string, tags []tag.Tag) *FatalError {
	e := &FatalError{Msg: msg}
	for _, t := range tags {
		if zt, ok := t.(tag.ZapTag); ok && zt.Field().Type == zapcore.ErrorType {
			if cause, ok := zt.Field().Interface.(error); ok && e.Cause == nil {
				e.Cause = cause
			}
		}
		e.Attrs = append(e.Attrs, fmt.Sprintf("%s=%v", t.Key(), t.Value()))
	}
	if e.Cause == nil {
		e.Cause = errors.New(msg)
	}
	return e
}
