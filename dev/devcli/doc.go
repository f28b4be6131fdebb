// Package devcli is the ferry command as the ferry-dev binary builds it: the
// production command tree (cmd/ferry/cli) plus the parts of `ferry dev` that
// the production binary leaves out, namely the embedded Temporal server and
// UI (package devserver), the sandbox payment provider and SMTP sink, and the
// demo producer and example consumer.
//
// It is for development and tests (the e2e tests run their ferry processes
// through Main), not for production.
package devcli
