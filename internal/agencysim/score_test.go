package agencysim

import "testing"

func TestScoreIsDeterministicAndInRange(t *testing.T) {
	seen := make(map[int]bool)
	for i := range 2000 {
		key := "user-" + string(rune('a'+i%26)) + string(rune('0'+i/26%10)) + string(rune('0'+i/260))
		s := Score(key)
		if s < MinScore || s > MaxScore {
			t.Fatalf("Score(%q) = %d, want in [%d, %d]", key, s, MinScore, MaxScore)
		}
		if again := Score(key); again != s {
			t.Fatalf("Score(%q) = %d then %d, want the same", key, s, again)
		}
		seen[s] = true
	}
	if len(seen) < 400 {
		t.Errorf("2000 keys got %d distinct scores, want them spread over the range", len(seen))
	}
	// Pinned values: a changed hash would change every user's score.
	for key, want := range map[string]int{"": 737, "U0001": 655, "user-1": 608, "U0000000000000000042": 662} {
		if got := Score(key); got != want {
			t.Errorf("Score(%q) = %d, want %d", key, got, want)
		}
	}
}

func BenchmarkScore(b *testing.B) {
	for b.Loop() {
		Score("U0000000000000000042")
	}
}
