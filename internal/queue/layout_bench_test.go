package queue_test

// Benchmarks of the ways a cell can lay out its inquiries on JetStream,
// side by side on the same embedded server (file store, every write
// synced) and the same disk: what accepting an inquiry costs, and what its
// whole life does. docs/decisions/one-write-intake.md reads them.
//
//	go test -run '^$' -bench Layout -benchtime 5s ./internal/queue/
//	CELLKIT_BENCH_DIR=/dev/shm go test -run '^$' -bench Layout -benchtime 5s ./internal/queue/

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellkit/cellkit/internal/celltest"
)

// benchJS starts an embedded server on $CELLKIT_BENCH_DIR (a temporary
// directory of the test's disk when unset) and connects to it in process,
// as a cell does.
func benchJS(b *testing.B) jetstream.JetStream {
	_, js := celltest.NATSIn(b, celltest.BenchDir(b))
	return js
}

// benchRecord is an inquiry record's size on the wire (a pending record of
// the intake's, JSON).
var benchRecord = make([]byte, 420)

// layout is one way to store inquiries: setup makes its streams, accept
// stores inquiry n and returns once that is durable.
type layout struct {
	name   string
	setup  func(ctx context.Context, js jetstream.JetStream) error
	accept func(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, n int64) error
}

var layouts = []layout{
	{
		// The limit: one synced publish, nothing checked.
		name: "raw-publish",
		setup: func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "raw", Subjects: []string{"raw.>"}, Storage: jetstream.FileStorage})
			return err
		},
		accept: func(ctx context.Context, js jetstream.JetStream, _ jetstream.KeyValue, n int64) error {
			_, err := js.Publish(ctx, "raw."+strconv.FormatInt(n, 10), benchRecord)
			return err
		},
	},
	{
		// Today's: the record created in a key-value bucket, then the work
		// message published to a work-queue stream; two synced writes.
		name: "record-then-message",
		setup: func(ctx context.Context, js jetstream.JetStream) error {
			if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "records", History: 1, Storage: jetstream.FileStorage}); err != nil {
				return err
			}
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "work", Subjects: []string{"work.>"}, Retention: jetstream.WorkQueuePolicy,
				Discard: jetstream.DiscardNew, Duplicates: 2 * time.Minute, Storage: jetstream.FileStorage})
			return err
		},
		accept: func(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, n int64) error {
			id := "i" + strconv.FormatInt(n, 10)
			if _, err := kv.Create(ctx, id, benchRecord); err != nil {
				return err
			}
			_, err := js.Publish(ctx, "work.normal."+id, []byte(`{"id":"`+id+`","job":"j1"}`), jetstream.WithMsgID(id+".j1"))
			return err
		},
	},
	{
		// One stream is the record and the work: the record published on
		// its inquiry's subject only if no message of that inquiry is there
		// (the expected last sequence of the inquiry's subjects, 0).
		name: "one-publish",
		setup: func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "inq", Subjects: []string{"inq.*.*.*"},
				MaxMsgsPerSubject: 1, Storage: jetstream.FileStorage})
			return err
		},
		accept: func(ctx context.Context, js jetstream.JetStream, _ jetstream.KeyValue, n int64) error {
			id := "i" + strconv.FormatInt(n, 10)
			_, err := js.Publish(ctx, "inq.new.normal."+id, benchRecord, jetstream.WithExpectLastSequenceForSubject(0, "inq.*.*."+id))
			return err
		},
	},
}

// BenchmarkLayoutAccept measures inquiries accepted per second by each
// layout from 32 clients (as BenchmarkIntake's), each acceptance durable
// before the next.
func BenchmarkLayoutAccept(b *testing.B) {
	for _, l := range layouts {
		b.Run(l.name, func(b *testing.B) {
			ctx := context.Background()
			js := benchJS(b)
			if err := l.setup(ctx, js); err != nil {
				b.Fatal(err)
			}
			kv, _ := js.KeyValue(ctx, "records")
			var n atomic.Int64
			b.SetParallelism(16)
			b.ResetTimer()
			began := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := l.accept(ctx, js, kv, n.Add(1)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(began).Seconds(), "accepted/s")
		})
	}
}

// BenchmarkLayoutLife measures whole lives: 32 clients accept inquiries
// while 16 workers take each one, write its final state and ack it, as
// the pipeline does (without the agencies). done/s counts the finished.
func BenchmarkLayoutLife(b *testing.B) {
	type life struct {
		name   string
		layout layout
		// consumer is the workers' lane consumer's config.
		consumer jetstream.ConsumerConfig
		stream   string
		// finish settles the delivered message m: reads what it must,
		// writes the final state, acks.
		finish func(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, m jetstream.Msg) error
	}
	lives := []life{
		{
			name: "record-then-message", layout: layouts[1], stream: "work",
			consumer: jetstream.ConsumerConfig{Durable: "w", FilterSubject: "work.normal.*", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1000},
			finish: func(ctx context.Context, _ jetstream.JetStream, kv jetstream.KeyValue, m jetstream.Msg) error {
				id := m.Subject()[len("work.normal."):]
				e, err := kv.Get(ctx, id)
				if err != nil {
					return err
				}
				if _, err := kv.Update(ctx, id, benchRecord, e.Revision()); err != nil {
					return err
				}
				return m.Ack()
			},
		},
		{
			// The final state on its own subject family: the accepted
			// message stays (acked) until the records' age limit.
			name: "one-publish,final-apart", layout: layouts[2], stream: "inq",
			consumer: jetstream.ConsumerConfig{Durable: "w", FilterSubject: "inq.new.normal.*", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1000},
			finish: func(ctx context.Context, js jetstream.JetStream, _ jetstream.KeyValue, m jetstream.Msg) error {
				md, err := m.Metadata()
				if err != nil {
					return err
				}
				id := m.Subject()[len("inq.new.normal."):]
				if _, err := js.Publish(ctx, "inq.rec.normal."+id, benchRecord, jetstream.WithExpectLastSequenceForSubject(md.Sequence.Stream, "inq.*.*."+id)); err != nil {
					return err
				}
				return m.Ack()
			},
		},
		{
			// The final state over the accepted message on the same
			// subject (one message per inquiry): the lane's consumer then
			// delivers the final state too, and the worker acks it unread.
			name: "one-publish,final-over", layout: layouts[2], stream: "inq",
			consumer: jetstream.ConsumerConfig{Durable: "w", FilterSubject: "inq.new.normal.*", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1000},
			finish: func(ctx context.Context, js jetstream.JetStream, _ jetstream.KeyValue, m jetstream.Msg) error {
				md, err := m.Metadata()
				if err != nil {
					return err
				}
				msg := nats.NewMsg(m.Subject())
				msg.Data = benchRecord
				msg.Header.Set("final", "1")
				if _, err := js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(md.Sequence.Stream)); err != nil {
					return err
				}
				return nil // the accepted message is gone: its delivery counts as acked
			},
		},
	}
	for _, l := range lives {
		b.Run(l.name, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			js := benchJS(b)
			if err := l.layout.setup(ctx, js); err != nil {
				b.Fatal(err)
			}
			kv, _ := js.KeyValue(ctx, "records")
			st, err := js.Stream(ctx, l.stream)
			if err != nil {
				b.Fatal(err)
			}
			c, err := st.CreateConsumer(ctx, l.consumer)
			if err != nil {
				b.Fatal(err)
			}
			var done atomic.Int64
			all := make(chan struct{})
			var once sync.Once
			work := make(chan jetstream.Msg, 64)
			cc, err := c.Consume(func(m jetstream.Msg) {
				select {
				case work <- m:
				case <-ctx.Done():
				}
			}, jetstream.PullMaxMessages(256))
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Stop()
			var wg sync.WaitGroup
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-ctx.Done():
							return
						case m := <-work:
							if string(m.Headers().Get("final")) != "" {
								_ = m.Ack()
								continue
							}
							if err := l.finish(ctx, js, kv, m); err != nil {
								if ctx.Err() == nil {
									b.Error(err)
								}
								continue
							}
							if done.Add(1) == int64(b.N) {
								once.Do(func() { close(all) })
							}
						}
					}
				}()
			}
			var n atomic.Int64
			b.SetParallelism(16)
			b.ResetTimer()
			began := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := l.layout.accept(ctx, js, kv, n.Add(1)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			select {
			case <-all:
			case <-time.After(time.Minute):
				b.Errorf("%d of %d done after a minute", done.Load(), b.N)
			}
			took := time.Since(began)
			b.StopTimer()
			cancel()
			cc.Stop()
			wg.Wait()
			b.ReportMetric(float64(b.N)/took.Seconds(), "done/s")
		})
	}
}
