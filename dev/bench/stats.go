package bench

import (
	"math"
	"slices"
	"time"
)

// Latency is a latency distribution's summary.
type Latency struct {
	P50 time.Duration `json:"p50_ns"`
	P95 time.Duration `json:"p95_ns"`
	P99 time.Duration `json:"p99_ns"`
	Max time.Duration `json:"max_ns"`
	// N is how many samples the summary is of.
	N int `json:"n"`
}

// Summarize returns the percentiles of samples (nearest-rank). It sorts
// samples in place. An empty slice gives the zero Latency.
func Summarize(samples []time.Duration) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	slices.Sort(samples)
	return Latency{
		P50: Percentile(samples, 50),
		P95: Percentile(samples, 95),
		P99: Percentile(samples, 99),
		Max: samples[len(samples)-1],
		N:   len(samples),
	}
}

// Percentile is the nearest-rank p-th percentile (0 < p <= 100) of sorted:
// the smallest sample with at least p % of the samples at or below it.
// sorted must be in ascending order and not empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

// Median is the median of xs (the mean of the middle two for an even
// count), skipping NaNs (a figure a rep could not measure); NaN for none.
// xs is not changed.
func Median(xs []float64) float64 {
	s := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		return math.NaN()
	}
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// medianDuration is Median over durations.
func medianDuration(ds []time.Duration) time.Duration {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d)
	}
	m := Median(xs)
	if math.IsNaN(m) {
		return 0
	}
	return time.Duration(m)
}
