// Package server owns zonefold's daemon and its client: the protocol
// (docs/protocol.md), the per-client shared-memory region and the
// submission and completion rings in it, sessions and their handle
// tables, batching of requests and replies, shutdown, the caps on
// clients, the single-daemon locks and the Prometheus metrics. The Go
// client (Dial, *Client) lives here too, so that both ends share one
// definition of the wire format.
//
// Invariants:
//
//   - Requests and replies are fixed-size little-endian headers. In
//     protocol version 2 they travel in a submission and a completion ring
//     in the shared region, and the socket only carries doorbells; in
//     version 1 a SOCK_SEQPACKET message carries one batch of them. The
//     client says which version in its hello. Everything of variable size
//     (data, names, listings, stats) lives in the client's shared-memory
//     region, which the daemon creates, seals against resizing and maps
//     for the connection's lifetime: a client cannot make the daemon fault
//     by shrinking it.
//   - Nothing a client sends or writes can crash the daemon, block it or
//     touch another client: every field is checked before use, and a
//     request that fails a check gets an error code. Every ring index a
//     client writes is checked against the daemon's own copies before use
//     (checkRing); a client that breaks framing or corrupts its rings loses
//     only its connection, with a log line saying why. The want word a
//     sleeping client writes (CQWant) is only compared with the daemon's
//     own tail to decide when to wake that client, never used as a bound,
//     and never delays its wake past the reply of the last request taken.
//   - Replies never block request intake. With rings, the completion ring
//     has room for every request taken (a client may have at most entries
//     outstanding) and doorbells are sent without waiting. With socket
//     framing only a connection's writer sends, so a client that does not
//     read its replies stalls that writer, never the reader; the reader
//     stops only when the client has MaxInflight requests unanswered.
//   - The read and write path allocates nothing (but for a cold read
//     that raced a change of its file and is read again, readAgain): requests live in slots
//     preallocated per connection, replies are encoded into the completion
//     ring or a preallocated buffer, and data moves between the region and
//     the engine's cache without an intermediate copy.
//   - A connection's region stays mapped and its handles stay open until
//     every request it took has finished; a client that vanishes cancels
//     only its own requests, and does so while the daemon shuts down too
//     (shutdown stopped reading it: its hang-up tells, cancelAtHangup).
//   - Requests run concurrently, per connection and across connections:
//     a slow fsync holds one worker, not the connection or the daemon.
//   - A reply sent or published is a result the client gets: at shutdown a
//     socket-framing connection is drained before it closes (so it ends
//     in end-of-file, not a reset ahead of the replies queued), the
//     replies of requests canceled at the end of the grace period (abort)
//     still go out as far as the socket has room for them (sendNow), a
//     request read then with no slot free is answered ESHUTDOWN, and the Go client
//     reads past the reset a dead daemon's socket leaves to the replies
//     queued behind it, and takes published ring replies before it looks
//     at the daemon's end.
//   - Clients are capped: connections past hello (Options.MaxConns; as
//     many again may wait to say hello, the oldest closed for a newer
//     one) and the shared memory of all regions together
//     (Options.MaxSharedMemory). A client that finds a cap reached while
//     another connection is ending (its client hung up, closing its
//     socket, which the socket tells before the daemon reads the end, or
//     its teardown runs: one
//     epoll instance, Server.hangups, holds every connection that has a
//     place, so that learning it costs one call, not one per
//     connection, at every arrival at the cap) waits
//     for that one to give its place and memory back (Server.awaitEnd,
//     up to slotWait), and is refused only if none is ending: a client
//     is never refused for one that has already gone. A client that shut
//     down only its sending side is still a client: its requests run to
//     their end, its replies reach it, and only then is its session
//     ending (conn.serve's teardown); one at the cap beside it is
//     refused at once.
//
// Lock order: Server.mu is taken alone, but for a connection's stopOnce,
// which shutdown's abort takes under it (stopReading). stopOnce is also
// waited in, with nothing held, by the hang-up watch of a session
// shutdown ended (conn.cancelAtHangup, for the first stopReading to have
// set its deadline); nothing is locked, and nothing waits, while it is
// held. A connection's handleTable.mu is
// taken before a handle's mu; a handle's mu is held (shared) across the
// engine call that uses its file, so it comes before every engine lock.
// A cold read the reader begins (startRead, engine.File.StartRead) holds
// it shared until the read ends, and the goroutine that ends it (the
// engine's ring reaper, or its cold-read finisher) releases it, in
// slot.ReadDone, taking then only the leaves below.
// rings.mu, replyQueue.mu and conn.tempsMu are leaves: nothing is
// locked, and nothing waits, while they are held. In the Go client,
// Client.mu comes before Client.batch. A synchronous call holds mu
// across its whole exchange with the daemon (including the wait, within
// the call's context, for the late replies of a call cut short before
// it claims the region, and for the Close it sends for a handle an Open
// cut short was given), and batch in each Submit and Recv it makes; the
// batch level (Submit, Recv) takes batch alone, with TryLock, so that a
// second goroutine is refused, not queued. Client.Close shuts the socket
// down before it takes mu and then batch, which ends those waits, and
// unmaps the region only with both held.
package server
