// Package inventory is a runnable example of the consumer half: an
// inventory service that reserves stock when an order is created and
// confirms the reservation when it is paid, applying each event once.
//
// It owns the inventory_reservations table and the queue inventory.orders
// (inventory.orders by default, bound to order.created and order.paid). `ferry dev` runs it next to the
// relay and the demo producer; `ferry consume-example` runs it alone. It is
// an example of packages inbox, consumer and upcast, not part of Ferry's
// contract.
package inventory
