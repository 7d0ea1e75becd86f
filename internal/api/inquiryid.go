package api

// An inquiry id is "<cell>-<slot><unique>": the cell that accepted it
// (which may itself hold '-'), the slot of its user's id in the cell map
// in IDSlotLen characters, and IDUniqueLen characters that say which
// inquiry, all of lower-case base32hex ([0-9a-v]). The cell is everything
// before the last '-'. The slot says where the inquiry lives now: the
// routers send a read to the slot's owner, as they send the user's new
// inquiries, and a user's inquiries move with the user's slot. An id made
// before ids held the slot is "<cell>-<unique>": it lives in its cell.
const (
	IDSlotLen   = 4  // 20 bits: every slot below slotmap.MaxSlots
	IDUniqueLen = 20 // 100 bits
)

// NoSlot is the slot of an id made before ids held one.
const NoSlot = -1

// ParseInquiryID splits an inquiry id into its cell, its slot (NoSlot for
// an id without one) and its unique part; ok is false when id is not one.
func ParseInquiryID[T ~string | ~[]byte](id T) (cell T, slot int, unique T, ok bool) {
	dash := -1
	for i := len(id) - 1; i >= 0; i-- {
		if id[i] == '-' {
			dash = i
			break
		}
	}
	if dash <= 0 || len(id) > MaxInquiryID {
		return cell, NoSlot, unique, false
	}
	cell, tail := id[:dash], id[dash+1:]
	if !ValidCellID(cell) {
		return cell, NoSlot, unique, false
	}
	for i := 0; i < len(tail); i++ {
		if base32hexValue(tail[i]) < 0 {
			return cell, NoSlot, unique, false
		}
	}
	switch len(tail) {
	case IDUniqueLen:
		return cell, NoSlot, tail, true
	case IDSlotLen + IDUniqueLen:
		slot = 0
		for i := range IDSlotLen {
			slot = slot<<5 | base32hexValue(tail[i])
		}
		return cell, slot, tail[IDSlotLen:], true
	}
	return cell, NoSlot, unique, false
}

// AppendIDSlot appends slot (0 ≤ slot < 2^20) as an id's IDSlotLen
// characters.
func AppendIDSlot(b []byte, slot int) []byte {
	for i := IDSlotLen - 1; i >= 0; i-- {
		b = append(b, base32hexDigits[slot>>(5*i)&31])
	}
	return b
}

const base32hexDigits = "0123456789abcdefghijklmnopqrstuv"

// base32hexValue is the value of a lower-case base32hex digit, -1 for
// any other byte.
func base32hexValue(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'v':
		return int(c-'a') + 10
	}
	return -1
}
