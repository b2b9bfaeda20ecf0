// Package server owns zonefold's daemon and its client: the socket
// protocol (docs/protocol.md), the per-client shared-memory data region,
// sessions and their handle tables, batching of requests and replies,
// shutdown, the single-daemon locks and the Prometheus metrics. The Go
// client (Dial, *Client) lives here too, so that both ends share one
// definition of the wire format.
//
// Invariants:
//
//   - Requests and replies are fixed-size little-endian headers; a
//     SOCK_SEQPACKET message carries one batch of them. Everything of
//     variable size (data, names, listings, stats) lives in the client's
//     shared-memory region, which the daemon creates, seals against
//     resizing and maps for the connection's lifetime: a client cannot
//     make the daemon fault by shrinking it.
//   - Nothing a client sends can crash the daemon or touch another
//     client: every field is checked before use, and a request that fails
//     a check gets an error code. A message that breaks framing closes
//     only that connection, with a log line saying why.
//   - The read and write path allocates nothing: requests live in slots
//     preallocated per connection, replies are encoded into a
//     preallocated buffer, and data moves between the region and the
//     engine's cache without an intermediate copy.
//   - A connection's region stays mapped and its handles stay open until
//     every request it sent has finished; a client that vanishes cancels
//     only its own requests.
//   - Requests run concurrently, per connection and across connections:
//     a slow fsync holds one worker, not the connection or the daemon.
//   - Replies never block request intake: only a connection's writer
//     sends, so a client that does not read its replies stalls that
//     writer, never the reader; the reader stops only when the client
//     has MaxInflight requests unanswered.
package server
