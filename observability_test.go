package ferry_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/ferry-outbox/ferry/effects/email"
	"github.com/ferry-outbox/ferry/effects/payment"
	"github.com/ferry-outbox/ferry/metrics"
	"github.com/ferry-outbox/ferry/walrelay"
)

// describer collects the names of every metric Ferry registers, and the
// label names of each.
type describer struct {
	names  []string
	labels map[string][]string
}

var (
	fqName      = regexp.MustCompile(`fqName: "([^"]+)"`)
	constLabels = regexp.MustCompile(`constLabels: \{([^}]*)\}`)
	varLabels   = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	labelName   = regexp.MustCompile(`(\w+)=`)
)

func (d *describer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		m := fqName.FindStringSubmatch(desc.String())
		if m == nil {
			continue
		}
		d.names = append(d.names, m[1])
		var labels []string
		if c := constLabels.FindStringSubmatch(desc.String()); c != nil {
			for _, l := range labelName.FindAllStringSubmatch(c[1], -1) {
				labels = append(labels, l[1])
			}
		}
		if v := varLabels.FindStringSubmatch(desc.String()); v != nil && v[1] != "" {
			labels = append(labels, strings.Split(v[1], ",")...)
		}
		if d.labels == nil {
			d.labels = map[string][]string{}
		}
		d.labels[m[1]] = labels
	}
	return nil
}
func (d *describer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = d.Register(c)
	}
}
func (d *describer) Unregister(prometheus.Collector) bool { return true }

func ferryMetricNames(t *testing.T) []string {
	t.Helper()
	return ferryMetrics(t).names
}

// ferryMetrics describes every metric Ferry registers.
func ferryMetrics(t *testing.T) *describer {
	t.Helper()
	d := &describer{}
	_, err := metrics.New(d)
	require.NoError(t, err)
	_, err = metrics.NewMaintenance(d)
	require.NoError(t, err)
	_, err = metrics.NewConsumer(d)
	require.NoError(t, err)
	_, err = email.NewMetrics(d)
	require.NoError(t, err)
	_, err = payment.NewMetrics(d)
	require.NoError(t, err)
	require.NoError(t, d.Register(metrics.NewOutboxCollector(nil)))
	require.NoError(t, d.Register(walrelay.NewSlotCollector(nil, walrelay.DefaultSlot)))
	require.Contains(t, d.names, "ferry_outbox_oldest_age_seconds")
	return d
}

// sdkMetricNames are the Temporal SDK's metric names as Ferry's /metrics
// serves them, read from the SDK's own definitions in the module cache
// (internal/common/metrics/constants.go): counters and gauges as defined,
// timers (..._latency) as histograms in seconds, ..._latency_seconds (see
// telemetry.TemporalMetrics). With them, ferry_repair_rejected, which the
// aggregate workflow emits through the SDK's metrics handler.
func sdkMetricNames(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "go.temporal.io/sdk").Output()
	require.NoError(t, err, "find the Temporal SDK's source")
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "internal", "common", "metrics", "constants.go"))
	require.NoError(t, err)
	// NAME = "literal" or NAME = OTHER + "suffix", in the metric keys block.
	def := regexp.MustCompile(`(?m)^\s*(\w+)\s*=\s*(?:(\w+)\s*\+\s*)?"([^"]*)"`)
	values := map[string]string{}
	var names []string
	for _, m := range def.FindAllStringSubmatch(string(src), -1) {
		v := m[3]
		if m[2] != "" {
			prefix, ok := values[m[2]]
			if !ok {
				continue
			}
			v = prefix + v
		}
		values[m[1]] = v
		if strings.HasPrefix(v, "temporal_") && v != "temporal_" {
			if strings.HasSuffix(v, "_latency") {
				v += "_seconds"
			}
			names = append(names, v)
		}
	}
	require.Contains(t, names, "temporal_workflow_task_schedule_to_start_latency_seconds", "the SDK's definitions parsed")
	require.Contains(t, names, "temporal_request_failure")
	return append(names, "ferry_repair_rejected")
}

var metricRef = regexp.MustCompile(`\b(?:ferry|temporal)_[a-z_]+`)

// requireKnownMetrics fails when expr names a metric Ferry's /metrics does
// not serve (histogram series end in _bucket, _sum or _count).
func requireKnownMetrics(t *testing.T, where, expr string, known []string) {
	t.Helper()
	refs := metricRef.FindAllString(expr, -1)
	require.NotEmpty(t, refs, "%s: %q uses no metric of Ferry's or of the Temporal SDK's", where, expr)
	for _, ref := range refs {
		base := ref
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if trimmed, ok := strings.CutSuffix(ref, suffix); ok && slices.Contains(known, trimmed) {
				base = trimmed
			}
		}
		require.Contains(t, known, base, "%s: %q names unknown metric %s", where, expr, ref)
	}
}

func TestAlertRulesUseFerryMetricsAndAge(t *testing.T) {
	t.Parallel()
	known := append(ferryMetricNames(t), sdkMetricNames(t)...)
	raw, err := os.ReadFile("deploy/prometheus/ferry-alerts.yml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	require.NotEmpty(t, rules.Groups)
	ageBased, scheduleToStart := false, false
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], "alert %s has no summary", r.Alert)
			require.Contains(t, []string{"page", "ticket"}, r.Labels["severity"], "alert %s", r.Alert)
			requireKnownMetrics(t, "alert "+r.Alert, r.Expr, known)
			ageBased = ageBased || strings.Contains(r.Expr, "ferry_outbox_oldest_age_seconds")
			scheduleToStart = scheduleToStart || strings.Contains(r.Expr, "temporal_workflow_task_schedule_to_start_latency_seconds_bucket")
		}
	}
	require.True(t, ageBased, "a backlog alert on age, not only depth")
	require.True(t, scheduleToStart, "an alert on the workers' workflow task schedule-to-start latency")
}

func TestGrafanaDashboardParses(t *testing.T) {
	t.Parallel()
	known := append(ferryMetricNames(t), sdkMetricNames(t)...)
	raw, err := os.ReadFile("deploy/grafana/ferry-dashboard.json")
	require.NoError(t, err)
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.NotEmpty(t, dash.UID)
	require.GreaterOrEqual(t, len(dash.Panels), 5)
	var exprs []string
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q", p.Title)
		for _, tg := range p.Targets {
			requireKnownMetrics(t, "panel "+p.Title, tg.Expr, known)
			exprs = append(exprs, tg.Expr)
		}
	}
	// The Temporal worker panels that matter for a Ferry worker.
	all := strings.Join(exprs, "\n")
	for _, m := range []string{"temporal_workflow_task_schedule_to_start_latency_seconds_bucket", "temporal_activity_schedule_to_start_latency_seconds_bucket",
		"temporal_workflow_task_queue_poll_succeed", "temporal_sticky_cache_hit", "temporal_workflow_task_execution_failed", "temporal_activity_execution_failed"} {
		require.Contains(t, all, m, "a panel over %s", m)
	}
}

// The promtool tests of the rules (ferry-alerts.test.yml) feed series with
// the labels Ferry's /metrics serves them with: each ferry_* series has
// exactly its metric's labels (plus le on a histogram's buckets) and the
// job and instance Prometheus adds. A test series with a label Ferry never
// sets, or without one it always sets, tests a rule against data that never
// comes. (The Temporal SDK's series are checked against a live scrape in
// dev/e2e.)
func TestAlertRuleTestsUseServedLabels(t *testing.T) {
	t.Parallel()
	d := ferryMetrics(t)
	raw, err := os.ReadFile("deploy/prometheus/ferry-alerts.test.yml")
	require.NoError(t, err)
	var file struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			Name   string `yaml:"name"`
			Series []struct {
				Series string `yaml:"series"`
			} `yaml:"input_series"`
		} `yaml:"tests"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &file))
	require.Equal(t, []string{"ferry-alerts.yml"}, file.RuleFiles)
	series := regexp.MustCompile(`^(\w+)\{(.*)\}$`)
	checked := 0
	for _, tc := range file.Tests {
		for _, s := range tc.Series {
			m := series.FindStringSubmatch(s.Series)
			require.NotNil(t, m, "test %q: series %q", tc.Name, s.Series)
			name := m[1]
			var got []string
			for _, l := range labelName.FindAllStringSubmatch(m[2], -1) {
				got = append(got, l[1])
			}
			require.Subset(t, got, []string{"job", "instance"}, "test %q: %s without the labels Prometheus adds", tc.Name, s.Series)
			if name == "up" || strings.HasPrefix(name, "temporal_") {
				continue
			}
			want, ok := []string(nil), false
			for _, base := range []string{name, strings.TrimSuffix(name, "_bucket"), strings.TrimSuffix(name, "_count"), strings.TrimSuffix(name, "_sum")} {
				if w, found := d.labels[base]; found {
					want, ok = append(slices.Clone(w), "job", "instance"), true
					if base != name && strings.HasSuffix(name, "_bucket") {
						want = append(want, "le")
					}
					break
				}
			}
			require.True(t, ok, "test %q: %s is no metric of Ferry's", tc.Name, name)
			require.ElementsMatch(t, want, got, "test %q: %s", tc.Name, s.Series)
			checked++
		}
	}
	require.Greater(t, checked, 50)
}
