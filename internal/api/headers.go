package api

// The header fields of the contract between the router and the cells:
// the router sets them on the way to a cell (and drops a client's own),
// the cell answers with Cellkit-Cell and, when it sheds, Cellkit-Overloaded.
const (
	HeaderMapVersion = "Cellkit-Map-Version"
	HeaderSlot       = "Cellkit-Slot"
	HeaderCell       = "Cellkit-Cell"
	HeaderOverloaded = "Cellkit-Overloaded"
	// HeaderIdemKey is the client's idempotency key, passed through.
	HeaderIdemKey = "Idempotency-Key"
	// HeaderClient names the router's client (the API key's holder) a
	// request comes from. An inquiry belongs to the client that created
	// it: a read naming another client is answered 404, as if it did not
	// exist. A caller that names no client (a trusted caller other than a
	// router, such as a test on loopback) is not checked.
	HeaderClient = "Cellkit-Client"
	// HeaderPriority is the lane the router decided for a new inquiry from
	// its client's policy (the API key's allowed lanes and default). It
	// wins over the body's priority, and the shedder decides on it before
	// the body is read. Without it (a trusted caller other than a router)
	// the body's priority is taken and shedding treats the request as
	// normal until its body is read.
	HeaderPriority = "Cellkit-Priority"
	// HeaderCall is the router's number for one call on one connection to
	// a cell (a decimal, growing along the connection). A cell echoes it
	// in its answer: an answer naming another call — a late or stray
	// answer the cell wrote to that connection — is then never taken for
	// the call's, and the router need not ask the kernel before each call
	// whether unasked bytes wait on the connection.
	HeaderCall = "Cellkit-Call"
	// HeaderLocalRead marks a read one cell asks another for on behalf
	// of a reader (an inquiry of a user pinned there, or one that did not
	// move): the asked cell answers from its own store, asking no one.
	HeaderLocalRead = "Cellkit-Local-Read"
)

// The header fields of the messages a cell keeps in its streams that
// another cell reads when users' inquiries move between them.
const (
	// HeaderWritten carries a copied message's first writing time (RFC
	// 3339) through moves: its life is counted from it.
	HeaderWritten = "Cellkit-Written"
	// HeaderMovedIn names the move a copied message came in with.
	HeaderMovedIn = "Cellkit-Moved-In"
)

// HeaderFault asks a cell built with the faults tag to kill itself at a
// point of an acceptance (kill-accept-<point>); tests send it. A release
// build ignores it.
const HeaderFault = "Cellkit-Fault"
