package relaydb

// SQLUndelivered is sqlUndelivered, for the test of its plan.
const SQLUndelivered = sqlUndelivered
