package slotmap

import (
	"fmt"
	"net/url"
	"strconv"

	"github.com/cellkit/cellkit/internal/api"
)

// Validate checks every invariant of the map. Maps built by this package are
// always valid; Validate is for maps that crossed a trust boundary.
func (m *Map) Validate() error {
	if err := m.checkHeader(); err != nil {
		return err
	}
	if err := m.checkCells(); err != nil {
		return err
	}
	return m.checkTable()
}

// checkTable checks the slot table and the overrides against the cells.
func (m *Map) checkTable() error {
	active := 0
	for _, c := range m.cells {
		if c.State == Active {
			active++
		}
	}
	switch {
	case active == 0 && len(m.table) != 0:
		return invalid("slots are assigned but no cell is active")
	case active > 0 && len(m.table) != m.slots:
		return invalid("slot table has %d slots, want %d", len(m.table), m.slots)
	}
	for s, ci := range m.table {
		if int(ci) >= len(m.cells) {
			return invalid("slot %d is assigned to an unknown cell", s)
		}
		if c := m.cells[ci]; c.State != Active {
			return invalid("slot %d is assigned to %s cell %q", s, c.State, c.ID)
		}
	}
	if len(m.overrides) > MaxOverrides {
		return invalid("%d overrides, at most %d", len(m.overrides), MaxOverrides)
	}
	for user, id := range m.overrides {
		if !api.ValidUserID(user) {
			return invalid("override for user %q: user id must be 1-%d of [A-Za-z0-9_-]", user, api.MaxUserID)
		}
		if _, ok := m.index[id]; !ok {
			return invalid("override for user %q points at unknown cell %q", user, id)
		}
	}
	return nil
}

func (m *Map) checkHeader() error {
	if m.version <= 0 {
		return invalid("version %d must be > 0", m.version)
	}
	if m.slots <= 0 || m.slots > MaxSlots {
		return invalid("slot count %d must be in 1..%d", m.slots, MaxSlots)
	}
	if len(m.change) > maxChange {
		return invalid("change description longer than %d bytes", maxChange)
	}
	for name, limit := range m.agencies {
		if !api.ValidAgency(name) {
			return invalid("agency name %q must be 1-32 of [a-z0-9_] starting with a letter", name)
		}
		if limit <= 0 {
			return invalid("agency %q: session limit %d must be > 0", name, limit)
		}
	}
	return nil
}

func (m *Map) checkCells() error {
	if len(m.cells) > MaxCells {
		return invalid("%d cells, at most %d", len(m.cells), MaxCells)
	}
	used := make(map[string]int, len(m.agencies))
	for i, c := range m.cells {
		if !api.ValidCellID(c.ID) {
			return invalid("cell id %q must be 1-32 of [a-z0-9-], starting and ending with a letter or digit", c.ID)
		}
		if i > 0 && m.cells[i-1].ID == c.ID {
			return invalid("duplicate cell id %q", c.ID)
		}
		switch c.State {
		case Active, Draining, Drained:
		default:
			return invalid("cell %q: state %q must be active, draining or drained", c.ID, c.State)
		}
		if c.Weight <= 0 || c.Weight > MaxWeight {
			return invalid("cell %q: weight %d must be in 1..%d", c.ID, c.Weight, MaxWeight)
		}
		if err := checkURL(c.Intake); err != nil {
			return invalid("cell %q: intake %v", c.ID, err)
		}
		if err := checkURL(c.Admin); err != nil {
			return invalid("cell %q: admin %v", c.ID, err)
		}
		if c.Capacity < 0 || c.Capacity > MaxCapacity {
			return invalid("cell %q: capacity %d req/s must be in 0..%d", c.ID, c.Capacity, MaxCapacity)
		}
		if len(c.Instances) > MaxInstances {
			return invalid("cell %q: %d instances, at most %d", c.ID, len(c.Instances), MaxInstances)
		}
		for j, in := range c.Instances {
			if !api.ValidCellID(in.ID) {
				return invalid("cell %q: instance id %q must be 1-32 of [a-z0-9-], starting and ending with a letter or digit", c.ID, in.ID)
			}
			if j > 0 && c.Instances[j-1].ID >= in.ID {
				return invalid("cell %q: instances must be in id order without duplicates (%q after %q)", c.ID, in.ID, c.Instances[j-1].ID)
			}
			if err := checkURL(in.Intake); err != nil {
				return invalid("cell %q: instance %q: intake %v", c.ID, in.ID, err)
			}
			if err := checkURL(in.Admin); err != nil {
				return invalid("cell %q: instance %q: admin %v", c.ID, in.ID, err)
			}
		}
		for agency, n := range c.FixedQuota {
			if _, ok := m.agencies[agency]; !ok {
				return invalid("cell %q: fixed quota for unknown agency %q", c.ID, agency)
			}
			if n < 0 {
				return invalid("cell %q: fixed quota %d for %q must be >= 0", c.ID, n, agency)
			}
		}
		for agency, n := range c.Quota {
			if _, ok := m.agencies[agency]; !ok {
				return invalid("cell %q: quota for unknown agency %q", c.ID, agency)
			}
			if n < 0 {
				return invalid("cell %q: quota %d for %q must be >= 0", c.ID, n, agency)
			}
			if n > 0 && !c.takesQuota() {
				return invalid("cell %q is drained but holds a quota of %d %q sessions", c.ID, n, agency)
			}
			used[agency] += n
		}
	}
	for agency, n := range used {
		if limit := m.agencies[agency]; n > limit {
			return invalid("agency %q: cell quotas sum to %d, over its session limit %d", agency, n, limit)
		}
	}
	return nil
}

// CheckURL reports why s is not usable as a cell endpoint, or nil.
func CheckURL(s string) error {
	if err := checkURL(s); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

func checkURL(s string) error {
	if plainURL(s) {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("url %q is malformed", s)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("url %q must be http:// or https://", s)
	}
	if u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("url %q has no host", s)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n <= 0 || n > 65535 {
			return fmt.Errorf("url %q has a bad port", s)
		}
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("url %q must not carry user info, query or fragment", s)
	}
	return nil
}

// plainURL reports whether s is an endpoint URL of the plain shape: http or
// https, a host of lower-case letters, digits, dots and dashes, an optional
// port in 1..65535 without leading zeros, an optional path of letters,
// digits and -._~/. Every such URL passes the checks of checkURL
// (FuzzPlainURL checks it), which takes this shortcut because url.Parse
// allocates and a map has thousands of endpoints.
func plainURL(s string) bool {
	var rest string
	switch {
	case len(s) > 7 && s[:7] == "http://":
		rest = s[7:]
	case len(s) > 8 && s[:8] == "https://":
		rest = s[8:]
	default:
		return false
	}
	i := 0
	for i < len(rest) && (isLower(rest[i]) || isDigit(rest[i]) || rest[i] == '.' || rest[i] == '-') {
		i++
	}
	if i == 0 {
		return false
	}
	if i < len(rest) && rest[i] == ':' {
		i++
		start, port := i, 0
		for i < len(rest) && isDigit(rest[i]) && i-start < 5 {
			port = port*10 + int(rest[i]-'0')
			i++
		}
		if i == start || rest[start] == '0' || port > 65535 {
			return false
		}
	}
	if i < len(rest) && rest[i] != '/' {
		return false
	}
	for ; i < len(rest); i++ {
		c := rest[i]
		if !isLower(c) && !isDigit(c) && !(c >= 'A' && c <= 'Z') && c != '-' && c != '.' && c != '_' && c != '~' && c != '/' {
			return false
		}
	}
	return true
}
