package telegram

import "testing"

func benchmarkAppendFrame(b *testing.B, p Profile) {
	m := messages[1]
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = p.AppendFrame(buf[:0], &m); err != nil {
			b.Fatal(err)
		}
	}
}

func benchmarkDecode(b *testing.B, p Profile) {
	body := validBody(b, p)
	var m Message
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Decode(body, &m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendFrameNICE(b *testing.B) { benchmarkAppendFrame(b, NICE()) }
func BenchmarkAppendFrameKCB(b *testing.B)  { benchmarkAppendFrame(b, KCB()) }
func BenchmarkDecodeNICE(b *testing.B)      { benchmarkDecode(b, NICE()) }
func BenchmarkDecodeKCB(b *testing.B)       { benchmarkDecode(b, KCB()) }
