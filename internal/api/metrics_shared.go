package api

// The series every program exports the same way: its release, its admin
// API's guard, the files it reloads and the certificates it serves.
var (
	MetricAdminAuthFailures = MetricSpec{
		Name:   "cellkit_admin_auth_failures_total",
		Type:   Counter,
		Help:   "Admin API requests refused with 401: reason missing (no bearer token) or wrong (a token not in the token file).",
		Labels: []string{LabelReason},
	}
	MetricBuildInfo = MetricSpec{
		Name:   "cellkit_build_info",
		Type:   Gauge,
		Help:   "The release the process runs: its program, version, source revision and release id (version, binary and settings), always 1.",
		Labels: []string{LabelProgram, LabelVersion, LabelRevision, LabelRelease},
	}
	MetricReloadLastSuccessTimestampSeconds = MetricSpec{
		Name:   "cellkit_reload_last_success_timestamp_seconds",
		Type:   Gauge,
		Help:   "When the files were last loaded successfully (at start or by a reload).",
		Labels: []string{LabelWhat},
	}
	MetricReloadRefused = MetricSpec{
		Name:   "cellkit_reload_refused",
		Type:   Gauge,
		Help:   "1 while the files on disk are ones the process refused (it runs on the ones it loaded before), 0 once it has loaded them.",
		Labels: []string{LabelWhat},
	}
	MetricReloads = MetricSpec{
		Name:   "cellkit_reloads_total",
		Type:   Counter,
		Help:   "Reloads of files read at runtime (API keys, certificates, tokens), by outcome: ok, or refused (the old state kept).",
		Labels: []string{LabelWhat, LabelResult},
	}
	MetricTLSCertificateExpiryTimestampSeconds = MetricSpec{
		Name:   "cellkit_tls_certificate_expiry_timestamp_seconds",
		Type:   Gauge,
		Help:   "When the certificate in use expires (its NotAfter), by the files it comes from.",
		Labels: []string{LabelWhat},
	}
)

// The registry's readers' series, declared without the prefix of the
// process that exports them: the map follower's (a router's and a cell's)
// and the rollout watch's (a router's). Each exporter registers them on a
// registerer that prefixes MetricPrefixRouter or MetricPrefixCell.
var (
	MetricMapAgeSeconds = MetricSpec{
		Name: "map_age_seconds",
		Type: Gauge,
		Help: "Seconds since the last successful registry round trip.",
	}
	MetricMapStale = MetricSpec{
		Name: "map_stale",
		Type: Gauge,
		Help: "1 when the map has not been confirmed by the registry for longer than the stale threshold.",
	}
	MetricMapSyncErrors = MetricSpec{
		Name: "map_sync_errors_total",
		Type: Counter,
		Help: "Registry round trips that failed.",
	}
	MetricMapUpdates = MetricSpec{
		Name: "map_updates_total",
		Type: Counter,
		Help: "New map versions installed.",
	}
	MetricMapVersion = MetricSpec{
		Name: "map_version",
		Type: Gauge,
		Help: "Version of the cell map in use.",
	}
	MetricRolloutReadErrors = MetricSpec{
		Name: "rollout_read_errors_total",
		Type: Counter,
		Help: "Reads of the registry's rollout record that failed (the last state read is kept).",
	}
	MetricRolloutState = MetricSpec{
		Name:   "rollout_state",
		Type:   Gauge,
		Help:   "1 for the state of the registry's rollout record (none: no record), 0 for the others.",
		Labels: []string{LabelState},
	}
	MetricRolloutUpdatedTimestampSeconds = MetricSpec{
		Name: "rollout_updated_timestamp_seconds",
		Type: Gauge,
		Help: "When the registry's rollout record last changed (Unix seconds; 0 without a record).",
	}
	MetricRolloutWave = MetricSpec{
		Name: "rollout_wave",
		Type: Gauge,
		Help: "The wave the registry's rollout is at, from 1 (waves + 1 when every wave is out; 0 without a record).",
	}
	MetricRolloutWaves = MetricSpec{
		Name: "rollout_waves",
		Type: Gauge,
		Help: "The waves of the registry's rollout.",
	}
)
