package effects

import (
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// Workflows registers the built-in effect workflows under their wire names
// (a worker.Config.Effects entry). Their activities come from
// effects/payment and effects/email.
type Workflows struct{}

// Register registers Payment and Email on r.
func (Workflows) Register(r worker.Registry) {
	r.RegisterWorkflowWithOptions(Payment, workflow.RegisterOptions{Name: PaymentWorkflowName})
	r.RegisterWorkflowWithOptions(Email, workflow.RegisterOptions{Name: EmailWorkflowName})
}
