package inquiry

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Score range of every source (the agencies answer in the same range).
const (
	MinScore = 300
	MaxScore = 899
)

// Rate range in basis points: the best score gets MinRateBps.
const (
	MinRateBps = 500
	MaxRateBps = 2000
)

// LimitPerPoint is the credit limit each score point above MinScore adds.
const LimitPerPoint = 100_000

// AgencyKey is the user key sent to the agencies: their telegram has 20
// bytes for it, so a longer user id is replaced by a digest of it.
func AgencyKey(userID string) string {
	if len(userID) <= 20 {
		return userID
	}
	h := sha256.Sum256([]byte(userID))
	return "h" + strings.ToLower(b32.EncodeToString(h[:]))[:19]
}

// CSSScore is the internal credit score: a pure function of the user.
func CSSScore(userID string) int {
	h := uint64(14695981039346656037)
	for _, c := range []byte("css:" + userID) {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return MinScore + int(h%(MaxScore-MinScore+1))
}

// Combined is the mean of the scores, rounded down, clamped to the range.
func Combined(scores map[string]int) int {
	if len(scores) == 0 {
		return MinScore
	}
	sum := 0
	for _, s := range scores {
		sum += min(max(s, MinScore), MaxScore)
	}
	return sum / len(scores)
}

// Decide computes the result of an inquiry from its scores: the rate falls
// linearly from MaxRateBps at MinScore to MinRateBps at MaxScore, the limit
// grows by LimitPerPoint per point and never exceeds the amount asked.
func Decide(scores map[string]int, amount int64) (rateBps int, limit int64) {
	c := Combined(scores)
	rateBps = MaxRateBps - (c-MinScore)*(MaxRateBps-MinRateBps)/(MaxScore-MinScore)
	limit = min(int64(c-MinScore+1)*LimitPerPoint, amount)
	return rateBps, limit
}

// CoreRef is the core banking registration number of an inquiry.
func CoreRef(id string) string {
	h := sha256.Sum256([]byte("core:" + id))
	return "CB" + strings.ToUpper(hex.EncodeToString(h[:6]))
}
