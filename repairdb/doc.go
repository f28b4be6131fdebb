// Package repairdb holds the SQL of repairs and replays: the audited
// changes an operator (or an on-poison=skip policy) makes to a blocked or
// delivered outbox row (LockForRepair, Skip, Retry, Patch, Requeue), and
// their audit table, ferry_repairs (InsertRepair, InsertReplay, AuditOf).
//
// Every audit row records a change to an outbox row (its event id,
// aggregate, version, payload digests and schema versions) and is written
// in the same transaction as that change, after the row was locked:
// migration 0002 creates both the table and the quarantined status it
// repairs. So the change and its audit live here together, each statement
// a named constant with the reason for its shape, and each function takes
// the caller's transaction: the package opens none, and returns the
// driver's errors unwrapped, for the caller (package activities) to name
// the operation and classify them. A repair of an aggregate the
// publish-first lane owns also takes the aggregate's ownership in that
// transaction (relaydb.LockOwner, relaydb.HandToWorkflow).
//
// It does not own the delivery bookkeeping (package relaydb) or the
// producer's inserts (package outbox).
package repairdb
