package inbox

// LockKey is the second key of the cleaner's advisory lock, for tests that
// hold it from outside.
func (c *Cleaner) LockKey() int32 { return int32(c.lock) }
