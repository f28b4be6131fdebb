// Package activities holds the Temporal activities of the aggregate workflow:
// publishing one outbox event to RabbitMQ and reading an aggregate's delivery
// cursor.
//
// Activities are methods on Activities, which holds the dependencies (a
// PostgreSQL pool and a broker.Publisher). Register them with Register: the
// registered names in package workflows are a wire contract.
//
// The package owns the SQL that reads an event and marks it published, and
// the mapping of an outbox row onto an AMQP message. It does not own retries:
// errors are classified (retryable or not) and the workflow's retry policy
// decides.
package activities
