package control

import (
	"fmt"
	"strconv"
	"time"
)

// HumanDuration renders a duration the way an operator reads it: 850ms,
// 4.2s, 3m12s, 2h05m, 3d4h (the controller's messages, cellctl's output).
func HumanDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + HumanDuration(-d)
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < 10*time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}
