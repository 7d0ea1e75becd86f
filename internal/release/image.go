package release

import (
	"fmt"
	"regexp"
)

// The grammar of an image reference, as the distribution project
// (the registries' reference implementation) writes it:
//
//	reference        := name [ ":" tag ] [ "@" digest ]
//	name             := [domain '/'] path-component ['/' path-component]*
//	domain           := host [':' port-number]
//	host             := domain-name | '[' IPv6address ']'
//	domain-name      := domain-component ['.' domain-component]*
//	domain-component := /([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])/
//	path-component   := alpha-numeric [separator alpha-numeric]*
//	alpha-numeric    := /[a-z0-9]+/
//	separator        := /[_.]|__|[-]+/
//	tag              := /[\w][\w.-]{0,127}/
//	digest           := algorithm ":" hex, the algorithm's components
//	                    /[A-Za-z][A-Za-z0-9]*/ joined by [-_+.], hex
//	                    /[0-9a-fA-F]{32,}/
//
// and a name of at most 255 characters.
var imageRef = func() *regexp.Regexp {
	const (
		alnum     = `[a-z0-9]+`
		separator = `(?:[._]|__|[-]+)`
		component = alnum + `(?:` + separator + alnum + `)*`
		domainCmp = `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
		host      = `(?:` + domainCmp + `(?:\.` + domainCmp + `)*|\[[a-fA-F0-9:]+\])`
		domain    = host + `(?::[0-9]+)?`
		name      = `(?:` + domain + `/)?` + component + `(?:/` + component + `)*`
		tag       = `[\w][\w.-]{0,127}`
		digest    = `[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}`
	)
	return regexp.MustCompile(`^(` + name + `)(?::` + tag + `)?(?:@` + digest + `)?$`)
}()

// maxImageName bounds the name part of a reference.
const maxImageName = 255

// ValidImage refuses a string that is not an image reference
// (registry.example.com/cellkit/cell:1.5.0, cellkit/cell@sha256:…).
func ValidImage(ref string) error {
	m := imageRef.FindStringSubmatch(ref)
	if m == nil {
		return fmt.Errorf("image %q is not an image reference (want one like registry.example.com/cellkit/cell:1.5.0)", ref)
	}
	if len(m[1]) > maxImageName {
		return fmt.Errorf("image %q: its name is %d characters, more than %d", ref, len(m[1]), maxImageName)
	}
	return nil
}
