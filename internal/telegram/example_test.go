package telegram_test

import (
	"bytes"
	"fmt"

	"github.com/cellkit/cellkit/internal/telegram"
)

func Example() {
	p := telegram.NICE()
	var conn bytes.Buffer // a session's connection

	req := telegram.Message{Type: telegram.Request, TraceNo: 42, UserKey: "user-0001"}
	frame, err := p.AppendFrame(nil, &req)
	if err != nil {
		fmt.Println(err)
		return
	}
	conn.Write(frame)
	fmt.Printf("%q\n", frame[:40])

	r := p.NewReader(&conn)
	body, err := r.ReadFrame()
	if err != nil {
		fmt.Println(err)
		return
	}
	var got telegram.Message
	if err := p.Decode(body, &got); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s %d %q %s\n", got.Type, got.TraceNo, got.UserKey, got.RespCode)

	req.TraceNo = 1_000_000_000_000
	_, err = p.AppendFrame(nil, &req)
	fmt.Println(err)
	// Output:
	// "00840200000000000042user-0001           "
	// 0200 42 "user-0001" 0000
	// telegram: field TraceNo: 1000000000000 does not fit in 12 digits
}
