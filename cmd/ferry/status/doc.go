// Package status gathers and renders what `ferry status` shows: the backlog
// (count and oldest age per status), recent throughput, blocked aggregates
// with their repair commands, and the last retention and reconcile runs.
//
// It owns the snapshot's shape (also its JSON, for scripts) and the text
// rendering. Collect reads PostgreSQL and Temporal; Render is pure, so its
// output is pinned by a golden file.
package status
