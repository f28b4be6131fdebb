package ferrytest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// Point is one series of a metric: a counter's or gauge's Value, or a
// histogram's Count, Sum and cumulative Buckets (nil for other kinds).
type Point struct {
	Value   float64
	Count   uint64
	Sum     float64
	Buckets map[float64]uint64
}

// Series reads the series of the metric name from g whose labels include
// labels (nil: every series).
func Series(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) []Point {
	t.Helper()
	families, err := g.Gather()
	require.NoError(t, err)
	var out []Point
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			p := Point{Value: m.GetCounter().GetValue() + m.GetGauge().GetValue()}
			if h := m.GetHistogram(); h != nil {
				p.Count, p.Sum, p.Buckets = h.GetSampleCount(), h.GetSampleSum(), map[float64]uint64{}
				for _, b := range h.GetBucket() {
					p.Buckets[b.GetUpperBound()] = b.GetCumulativeCount()
				}
			}
			out = append(out, p)
		}
	}
	return out
}

// Sample reads the first series of the metric name whose labels include
// labels (nil: any): a counter's or gauge's value, a histogram's count of
// observations; 0 when there is no such series.
func Sample(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	s := Series(t, g, name, labels)
	switch {
	case len(s) == 0:
		return 0
	case s[0].Buckets != nil:
		return float64(s[0].Count)
	default:
		return s[0].Value
	}
}

// HasMetric says whether g has a series of the metric name.
func HasMetric(t testing.TB, g prometheus.Gatherer, name string) bool {
	t.Helper()
	return len(Series(t, g, name, nil)) > 0
}
