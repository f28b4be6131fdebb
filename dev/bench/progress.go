package bench

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// progress prints what the benchmark is doing, for a person watching: a
// numbered line per step, a live counter while events flow (rewritten in
// place on a terminal, every 10 s otherwise), and the step's outcome.
type progress struct {
	mu     sync.Mutex
	w      io.Writer
	tty    bool
	start  time.Time
	steps  int
	cur    int
	open   bool // a live line is open (terminal only)
	lastAt time.Time
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w, start: time.Now()}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) endLive() {
	if p.open {
		fmt.Fprintln(p.w)
		p.open = false
	}
}

// say prints an informational line.
func (p *progress) say(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLive()
	fmt.Fprintf(p.w, "        %s\n", fmt.Sprintf(format, args...))
}

// step starts the next numbered step.
func (p *progress) step(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLive()
	p.cur++
	el := time.Since(p.start).Round(time.Second)
	fmt.Fprintf(p.w, "[%2d/%d %s] %s\n", p.cur, p.steps, clock(el), fmt.Sprintf(format, args...))
	p.lastAt = time.Now()
}

// update shows how far the current run is.
func (p *progress) update(got, committed, planned int, producing bool, elapsed time.Duration) {
	state := "all committed"
	if producing {
		state = fmt.Sprintf("committing, %s of ~%s so far", count(committed), count(planned))
	}
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(got) / s
	}
	p.live(fmt.Sprintf("received %s / %s (%s/s over %s; %s)", count(got), count(committed), count(int(rate)), clock(elapsed.Round(time.Second)), state))
}

// live shows a line of a step's progress: rewritten in place on a
// terminal (at most 4 times a second), printed every 10 s otherwise.
func (p *progress) live(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.tty && time.Since(p.lastAt) < 10*time.Second {
		return
	}
	if p.tty && time.Since(p.lastAt) < 250*time.Millisecond {
		return
	}
	p.lastAt = time.Now()
	line = "        " + line
	if p.tty {
		fmt.Fprintf(p.w, "\r%-110s", line)
		p.open = true
		return
	}
	fmt.Fprintln(p.w, line)
}

// done prints the outcome of the current step.
func (p *progress) done(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLive()
	fmt.Fprintf(p.w, "        → %s\n", fmt.Sprintf(format, args...))
}

// clock formats d as m:ss or h:mm:ss.
func clock(d time.Duration) string {
	s := int(d.Seconds())
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

// round shortens a duration for people: 1.234567s → 1.23s.
func round(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// dur formats a latency for a table column: "850µs", "12ms", "2.10s", "1m05s".
func dur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
	return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
}
