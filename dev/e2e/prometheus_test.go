package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/ferry-outbox/ferry/ferrytest"
)

// A Prometheus of one test's own: Debian's binary (package prometheus, 2.42;
// FERRY_PROMETHEUS names it, else prometheus on the PATH: `make prometheus`
// unpacks it), its own configuration, data folder and free port, scraping
// the targets the test adds and evaluating the rules it is given, every
// second. Tests read it through its HTTP API: queries, series, and the
// state of each alert over time (promAlert). Nothing here knows Ferry's
// rules; alerts_test.go is one user, and any e2e test that wants its
// metrics judged by a real Prometheus can be another.

// promConfig configures startPrometheus.
type promConfig struct {
	// Jobs are the scrape jobs; their targets are added with AddTarget
	// (file-based discovery, so a target may come and go). Each scrapes
	// /metrics.
	Jobs []string
	// Rules is the content of the rules file; empty: no rules.
	Rules []byte
	// ScrapeInterval; default 2s (also its timeout). Rules are evaluated
	// every EvalInterval, default 1s.
	ScrapeInterval, EvalInterval time.Duration
}

// promServer is a running Prometheus.
type promServer struct {
	URL string
	dir string
	cfg promConfig

	mu      sync.Mutex
	targets map[string][]string // job → host:port
	alerts  []*promAlert
	started time.Time
}

// prometheusBinary is the Prometheus binary the tests run.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FERRY_PROMETHEUS"); p != "" {
		_, err := os.Stat(p)
		require.NoError(t, err, "FERRY_PROMETHEUS=%s", p)
		return p
	}
	p, err := exec.LookPath("prometheus")
	require.NoError(t, err, "the alert tests need Prometheus (Debian package prometheus): run `make prometheus`, or set FERRY_PROMETHEUS to the binary")
	return p
}

// startPrometheus starts a Prometheus that runs until the test ends. A start
// that loses its picked port to another process is tried again.
func startPrometheus(t *testing.T, cfg promConfig) *promServer {
	t.Helper()
	cfg.ScrapeInterval = cmp.Or(cfg.ScrapeInterval, 2*time.Second)
	cfg.EvalInterval = cmp.Or(cfg.EvalInterval, time.Second)
	bin := prometheusBinary(t)
	p := &promServer{dir: t.TempDir(), cfg: cfg, targets: map[string][]string{}}
	type scrape struct {
		JobName       string `yaml:"job_name"`
		FileSDConfigs []struct {
			Files []string `yaml:"files"`
		} `yaml:"file_sd_configs"`
	}
	conf := map[string]any{
		"global": map[string]string{
			"scrape_interval": cfg.ScrapeInterval.String(), "scrape_timeout": cfg.ScrapeInterval.String(),
			"evaluation_interval": cfg.EvalInterval.String(),
		},
	}
	var jobs []scrape
	for _, j := range cfg.Jobs {
		p.writeTargets(t, j)
		s := scrape{JobName: j}
		s.FileSDConfigs = append(s.FileSDConfigs, struct {
			Files []string `yaml:"files"`
		}{Files: []string{p.targetsFile(j)}})
		jobs = append(jobs, s)
	}
	conf["scrape_configs"] = jobs
	if len(cfg.Rules) > 0 {
		rules := filepath.Join(p.dir, "rules.yml")
		require.NoError(t, os.WriteFile(rules, cfg.Rules, 0o644))
		conf["rule_files"] = []string{rules}
	}
	raw, err := yaml.Marshal(conf)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(p.dir, "prometheus.yml"), raw, 0o644))

	for try := 1; ; try++ {
		addr := ferrytest.ClosedAddr(t)
		cmd := exec.Command(bin, "--config.file="+filepath.Join(p.dir, "prometheus.yml"),
			"--storage.tsdb.path="+filepath.Join(p.dir, "data"), "--web.listen-address="+addr,
			"--storage.tsdb.retention.time=1d", "--log.level=warn")
		out := &ferrytest.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		require.NoError(t, cmd.Start())
		c := &child{cmd: cmd, out: out, done: make(chan struct{})}
		go func() { c.err = cmd.Wait(); close(c.done) }()
		p.URL = "http://" + addr
		deadline := time.Now().Add(60 * time.Second)
		for !c.exited() && !p.ready() && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if !c.exited() && p.ready() {
			p.started = time.Now()
			t.Cleanup(func() {
				c.kill()
				if t.Failed() {
					t.Logf("Prometheus %s output:\n%s", p.URL, out.String())
				}
			})
			go p.watch(t.Context(), c)
			return p
		}
		c.kill()
		if try == 3 || !strings.Contains(out.String(), "address already in use") {
			t.Fatalf("Prometheus did not start on %s:\n%s", addr, out.String())
		}
	}
}

func (p *promServer) ready() bool {
	resp, err := http.Get(p.URL + "/-/ready")
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (p *promServer) targetsFile(job string) string {
	return filepath.Join(p.dir, "targets-"+job+".json")
}

// writeTargets writes the job's file-discovery list (a rename, so that
// Prometheus never reads half a file).
func (p *promServer) writeTargets(t *testing.T, job string) {
	t.Helper()
	p.mu.Lock()
	list := []map[string]any{{"targets": append([]string{}, p.targets[job]...)}}
	p.mu.Unlock()
	raw, err := json.Marshal(list)
	require.NoError(t, err)
	tmp := p.targetsFile(job) + ".tmp"
	require.NoError(t, os.WriteFile(tmp, raw, 0o644))
	require.NoError(t, os.Rename(tmp, p.targetsFile(job)))
}

// AddTarget adds host:port to job's targets and waits until Prometheus has
// scraped it once, successfully.
func (p *promServer) AddTarget(t *testing.T, job, addr string) {
	t.Helper()
	require.Contains(t, p.cfg.Jobs, job, "job %s is not in the configuration", job)
	p.mu.Lock()
	p.targets[job] = append(p.targets[job], addr)
	p.mu.Unlock()
	p.writeTargets(t, job)
	q := fmt.Sprintf(`up{job=%q, instance=%q} == 1`, job, addr)
	waitFor(t, 60*time.Second, "Prometheus scraping "+addr, func() bool {
		v, err := p.Query(q)
		return err == nil && len(v) == 1
	})
}

// promSample is one series of an instant query's result.
type promSample struct {
	Metric map[string]string
	Value  float64
}

// apiGet calls Prometheus' HTTP API and decodes data; an API error (a query
// that does not parse or evaluate) is returned as an error.
func (p *promServer) apiGet(path string, params url.Values, data any) error {
	resp, err := http.Get(p.URL + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("%s: HTTP %d: %s", path, resp.StatusCode, bytes.TrimSpace(body))
	}
	if env.Status != "success" {
		return fmt.Errorf("%s %s: %s", path, params.Encode(), env.Error)
	}
	return json.Unmarshal(env.Data, data)
}

// Query evaluates expr now; a scalar result is one sample without labels.
func (p *promServer) Query(expr string) ([]promSample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.apiGet("/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	var out []promSample
	switch data.ResultType {
	case "vector":
		var vec []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(data.Result, &vec); err != nil {
			return nil, err
		}
		for _, s := range vec {
			var v float64
			_, _ = fmt.Sscan(fmt.Sprint(s.Value[1]), &v)
			out = append(out, promSample{Metric: s.Metric, Value: v})
		}
	case "scalar":
		var s [2]any
		if err := json.Unmarshal(data.Result, &s); err != nil {
			return nil, err
		}
		var v float64
		_, _ = fmt.Sscan(fmt.Sprint(s[1]), &v)
		out = append(out, promSample{Value: v})
	default:
		return nil, fmt.Errorf("query %s: result type %s", expr, data.ResultType)
	}
	return out, nil
}

// QueryRange evaluates expr over [start, end] every step and returns the
// number of series with at least one point.
func (p *promServer) QueryRange(expr string, start, end time.Time, step time.Duration) (int, error) {
	var data struct {
		Result []struct {
			Values [][2]any `json:"values"`
		} `json:"result"`
	}
	err := p.apiGet("/api/v1/query_range", url.Values{"query": {expr},
		"start": {fmt.Sprint(start.Unix())}, "end": {fmt.Sprint(end.Unix() + 1)}, "step": {step.String()}}, &data)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range data.Result {
		if len(r.Values) > 0 {
			n++
		}
	}
	return n, nil
}

// Series returns the label sets of the series matching selector stored
// since the server started.
func (p *promServer) Series(selector string) ([]map[string]string, error) {
	var out []map[string]string
	err := p.apiGet("/api/v1/series", url.Values{"match[]": {selector},
		"start": {fmt.Sprint(p.started.Add(-time.Minute).Unix())}, "end": {fmt.Sprint(time.Now().Unix() + 1)}}, &out)
	return out, err
}

// promAlert follows one alert (an alert name and labels its instances must
// carry) through its states: pending, firing, and back to inactive.
type promAlert struct {
	Name   string
	Labels map[string]string

	mu      sync.Mutex
	state   string    // inactive, pending or firing, as last seen
	pending time.Time // when pending was first seen after the last reset
	firing  time.Time // when firing was first seen after the last reset
	clear   time.Time // when it was last seen inactive after firing
	history []string  // states as seen, collapsed ("inactive pending firing inactive")
}

// Alert starts following an alert, from its current state.
func (p *promServer) Alert(name string, labels map[string]string) *promAlert {
	a := &promAlert{Name: name, Labels: labels, state: "inactive", history: []string{"inactive"}}
	p.mu.Lock()
	p.alerts = append(p.alerts, a)
	p.mu.Unlock()
	return a
}

// watch polls the active alerts every 200ms and moves each followed alert
// to the state seen (firing wins over pending when several instances
// match).
func (p *promServer) watch(ctx context.Context, proc *child) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-proc.done:
			return
		case <-tick.C:
		}
		var data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		}
		if err := p.apiGet("/api/v1/alerts", nil, &data); err != nil {
			continue
		}
		now := time.Now()
		p.mu.Lock()
		followed := slices.Clone(p.alerts)
		p.mu.Unlock()
		for _, a := range followed {
			state := "inactive"
			for _, al := range data.Alerts {
				if al.Labels["alertname"] != a.Name || !matches(al.Labels, a.Labels) {
					continue
				}
				if al.State == "firing" || state == "inactive" {
					state = al.State
				}
			}
			a.see(state, now)
		}
	}
}

func matches(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func (a *promAlert) see(state string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if state == a.state {
		return
	}
	a.history = append(a.history, state)
	switch state {
	case "pending":
		if a.pending.IsZero() {
			a.pending = at
		}
	case "firing":
		if a.firing.IsZero() {
			a.firing = at
		}
	case "inactive":
		if !a.firing.IsZero() {
			a.clear = at
		}
	}
	a.state = state
}

// String is the alert's name and labels.
func (a *promAlert) String() string {
	if len(a.Labels) == 0 {
		return a.Name
	}
	var parts []string
	for k, v := range a.Labels {
		parts = append(parts, k+"="+v)
	}
	slices.Sort(parts)
	return a.Name + "{" + strings.Join(parts, ",") + "}"
}

// WaitFiring waits until the alert fires and returns when it was first seen
// firing. With wantPending (a rule with a `for:`), it must have been seen
// pending first.
func (a *promAlert) WaitFiring(t *testing.T, timeout time.Duration, wantPending bool) time.Time {
	t.Helper()
	var fired, pending time.Time
	waitFor(t, timeout, a.String()+" firing", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		fired, pending = a.firing, a.pending
		return !fired.IsZero()
	})
	if wantPending {
		require.False(t, pending.IsZero(), "%s fired without being seen pending first (states: %v)", a, a.History())
		require.True(t, !pending.After(fired), "%s: pending at %s, firing at %s", a, pending, fired)
	}
	return fired
}

// WaitResolved waits until the alert, having fired, is inactive again, and
// returns when that was first seen.
func (a *promAlert) WaitResolved(t *testing.T, timeout time.Duration) time.Time {
	t.Helper()
	var clear time.Time
	waitFor(t, timeout, a.String()+" resolved", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		clear = a.clear
		return !clear.IsZero() && a.state == "inactive"
	})
	return clear
}

// State is the alert's state as last seen.
func (a *promAlert) State() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state
}

// History is the sequence of states seen.
func (a *promAlert) History() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.history)
}
