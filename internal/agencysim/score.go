package agencysim

// Score ranges: every score the simulator answers is in [MinScore, MaxScore].
const (
	MinScore = 300
	MaxScore = 899
)

// Score is the credit score the simulator answers for userKey: a pure
// function of the key (FNV-1a), so the same user always gets the same score,
// from every agency, in every run.
func Score(userKey string) int {
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := 0; i < len(userKey); i++ {
		h ^= uint64(userKey[i])
		h *= prime64
	}
	return MinScore + int(h%(MaxScore-MinScore+1))
}
