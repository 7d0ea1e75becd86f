package wire

// BufCap is the capacity of the reader's body buffer, for tests that check
// the reader never sizes it beyond MaxBody.
func (r *Reader) BufCap() int { return cap(r.buf) }

// Max is the largest body the framing accepts, after defaults.
func (f Framing) Max() int { return f.maxBody() }
