package tlsconf

import "flag"

// Flags: every program names its TLS files the same way, under a prefix
// that says which listener or client they are for ("" for a program's main
// listener, "admin-" for its admin listener, "cell-" for a router's calls
// to the cells).

// RegisterFlags adds --PREFIXtls-cert, --PREFIXtls-key,
// --PREFIXtls-client-ca and --PREFIXtls-client-role to fs; what names the
// listener in their usage. role is the client role required by default
// when a client CA is given.
func (f *ServerFiles) RegisterFlags(fs *flag.FlagSet, prefix, what, role string) {
	fs.StringVar(&f.Cert, prefix+"tls-cert", "", what+": TLS certificate chain file (PEM); with --"+prefix+"tls-key, the listener speaks TLS only (reloaded when the file changes or on SIGHUP)")
	fs.StringVar(&f.Key, prefix+"tls-key", "", what+": TLS private key file (PEM)")
	fs.StringVar(&f.ClientCA, prefix+"tls-client-ca", "", what+": CA file (PEM); when set, only clients with a certificate it signed are served (mutual TLS)")
	f.ClientRole = role
	fs.StringVar(&f.ClientRole, prefix+"tls-client-role", role, what+": with --"+prefix+"tls-client-ca, the role (certificate Subject OU) a client certificate must name (empty: any)")
}

// Enabled says whether the listener speaks TLS.
func (f ServerFiles) Enabled() bool { return f.Cert != "" || f.Key != "" }

// RegisterFlags adds --PREFIXtls-ca, --PREFIXtls-cert and --PREFIXtls-key
// to fs; what names the servers in their usage.
// The values f holds are kept as the defaults: registering the flags again
// on another FlagSet (a command's, after the global ones were parsed)
// keeps what was set.
func (f *ClientFiles) RegisterFlags(fs *flag.FlagSet, prefix, what string) {
	fs.StringVar(&f.CA, prefix+"tls-ca", f.CA, "CA file (PEM) that "+what+"'s certificates must be signed by, for https (default: the system's roots)")
	fs.StringVar(&f.Cert, prefix+"tls-cert", f.Cert, "client certificate file (PEM) presented to "+what+" (mutual TLS; reloaded when the file changes or on SIGHUP)")
	fs.StringVar(&f.Key, prefix+"tls-key", f.Key, "client private key file (PEM) for --"+prefix+"tls-cert")
}
