// Package serve runs the accept loop of a sandbox server (payprovider,
// smtpsink): Start binds the address and serves in the background, Stop
// closes the server and waits for the loop to end.
package serve
