package linearizability

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"
)

// NewModel returns the porcupine model of the keyspace (see State and
// Step); its initial state is an empty keyspace (the recorder flushes it
// first). With evictable, keys may vanish at any time.
func NewModel(evictable bool) porcupine.Model {
	return (&porcupine.NondeterministicModel{
		Init: func() []any { return []any{State{}} },
		Step: func(state, input, output any) []any {
			next := Step(state.(State), input.(Input), output.(Output), evictable)
			out := make([]any, len(next))
			for i, s := range next {
				out[i] = s
			}
			return out
		},
		Equal:             func(a, b any) bool { return a.(State) == b.(State) },
		DescribeOperation: func(in, out any) string { return Describe(in.(Input), out.(Output)) },
		DescribeState:     func(s any) string { return DescribeState(s.(State)) },
	}).ToModel()
}

// Workload describes the clients of one recorded history.
type Workload struct {
	// Addr is where every client connects (Cicada).
	Addr string
	// Readers and Writers give each client's database; readers issue GET
	// and HGET, writers Writes.
	Readers, Writers []int
	// Writes are the write kinds writers draw from (default AllWrites).
	Writes []Kind
	// Duration bounds the recording; Ops bounds the operations per client
	// (0: no bound).
	Duration time.Duration
	Ops      int
	// Pause and WriterPause are the longest random pauses between a
	// reader's and a writer's operations (WriterPause 0: Pause).
	Pause, WriterPause time.Duration
	Seed               uint64
	// Tolerate keeps recording when connections fail (fault tests): a
	// failed write is kept with an unknown outcome, a failed read dropped.
	Tolerate bool
}

// AllWrites are every write kind the model knows.
var AllWrites = []Kind{Set, SetTTL, Del, Incr, Append, GetDel, MSet, HSet, HDel, PExpire, Rename, Copy, Move,
	SwapDB, FlushDB, FlushAll, EvalSet, FCallSet, Multi, EvalSwapDB}

// evalSet is the script of EvalSet: it writes keys it does not declare.
const evalSet = "redis.call('SET', ARGV[1], ARGV[2]) redis.call('DEL', ARGV[3]) return 1"

// Record runs w and returns the history. It fails (error) if a client's
// connection fails: a history with unknown outcomes is not checked here.
func Record(ctx context.Context, w Workload) ([]porcupine.Operation, error) {
	if w.Writes == nil {
		w.Writes = AllWrites
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, w.Duration)
	defer cancel()
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		wg      sync.WaitGroup
		errs    = make(chan error, len(w.Readers)+len(w.Writers))
	)
	run := func(id, db int, writer bool) {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(w.Seed, uint64(id)))
		rc := redis.NewClient(&redis.Options{Addr: w.Addr, DB: db, Protocol: 2 + id%2, PoolSize: 1,
			MaxRetries: -1, DisableIdentity: true, ReadTimeout: 10 * time.Second})
		defer rc.Close()
		for i := 0; (w.Ops == 0 || i < w.Ops) && ctx.Err() == nil; i++ {
			var in Input
			if writer {
				in = randomWrite(rng, w.Writes, id, i)
			} else {
				in = randomRead(rng)
			}
			in.DB = db
			in.Call, in.WallCall = since(start)
			out, err := do(rc, in)
			in.Return, in.WallReturn = since(start)
			switch {
			case err != nil && !w.Tolerate:
				errs <- fmt.Errorf("client %d: %s: %w", id, describeInput(in), err)
				return
			case err != nil && !writer:
				continue
			case err != nil:
				in.Return, in.WallReturn, out = math.MaxInt64, math.MaxInt64, Output{Unknown: true}
				time.Sleep(10 * time.Millisecond)
			}
			mu.Lock()
			history = append(history, porcupine.Operation{ClientId: id, Input: in, Call: in.Call, Output: out, Return: in.Return})
			mu.Unlock()
			if pause := w.Pause; pause > 0 {
				if writer && w.WriterPause > 0 {
					pause = w.WriterPause
				}
				time.Sleep(time.Duration(rng.Int64N(int64(pause))))
			}
		}
	}
	id := 0
	for _, db := range w.Readers {
		wg.Add(1)
		go run(id, db, false)
		id++
	}
	for _, db := range w.Writers {
		wg.Add(1)
		go run(id, db, true)
		id++
	}
	wg.Wait()
	close(errs)
	return history, <-errs
}

func randomRead(r *rand.Rand) Input {
	if r.IntN(3) == 0 {
		return Input{Kind: HGet, Key: keyH, Field: r.IntN(2)}
	}
	return Input{Kind: Get, Key: r.IntN(3)}
}

// randomWrite draws a write; values are unique per client and operation
// so that a read shows which write it saw.
func randomWrite(r *rand.Rand, kinds []Kind, id, i int) Input {
	in := Input{Kind: kinds[r.IntN(len(kinds))], Key: r.IntN(3)}
	in.Key2 = (in.Key + 1 + r.IntN(2)) % 3
	in.Val = "w" + strconv.Itoa(id) + "-" + strconv.Itoa(i)
	in.Val2 = in.Val + "b"
	switch in.Kind {
	case Set:
		if in.Key == keyN {
			in.Val = strconv.Itoa(r.IntN(100))
		}
	case Incr:
		in.Key = keyN
		if r.IntN(8) == 0 {
			in.Key = keyA
		}
	case HSet, HDel:
		in.Key, in.Field = keyH, r.IntN(2)
	case PExpire:
		in.TTL = 1 + r.Int64N(50)
		if r.IntN(4) == 0 {
			in.TTL = 1000 // sent as EXPIRE key 1
		}
		if r.IntN(4) == 0 {
			in.Key = keyH
		}
	case SetTTL:
		in.TTL = 1 + r.Int64N(50)
		if r.IntN(2) == 0 {
			in.TTL = 10_000 // sent as SET key value EX 10
		}
	case Multi:
		in.Batch = make([]Input, 1+r.IntN(3))
		for j := range in.Batch {
			b := randomWrite(r, []Kind{Set, SetTTL, Del, Incr, Append, HSet, PExpire, GetDel}, id, i)
			b.Val += "." + strconv.Itoa(j)
			in.Batch[j] = b
		}
	}
	return in
}

// args returns the command for in.
func args(in Input) []any {
	k, k2 := keyNames[in.Key], keyNames[in.Key2]
	switch in.Kind {
	case Get, Del, Incr, GetDel:
		return []any{kindNames[in.Kind], k}
	case HGet, HDel:
		return []any{kindNames[in.Kind], "h", fieldNames[in.Field]}
	case Set, Append:
		return []any{kindNames[in.Kind], k, in.Val}
	case SetTTL:
		if in.TTL%1000 == 0 {
			return []any{"SET", k, in.Val, "EX", in.TTL / 1000}
		}
		return []any{"SET", k, in.Val, "PX", in.TTL}
	case MSet:
		return []any{"MSET", "a", in.Val, "b", in.Val2}
	case HSet:
		return []any{"HSET", "h", fieldNames[in.Field], in.Val}
	case PExpire:
		if in.TTL%1000 == 0 {
			return []any{"EXPIRE", k, in.TTL / 1000}
		}
		return []any{"PEXPIRE", k, in.TTL}
	case Rename, Copy:
		return []any{kindNames[in.Kind], k, k2}
	case Move:
		return []any{"MOVE", k, 1 - in.DB}
	case SwapDB:
		return []any{"SWAPDB", 0, 1}
	case FlushDB, FlushAll:
		return []any{kindNames[in.Kind]}
	case EvalSet:
		return []any{"EVAL", evalSet, 0, k, in.Val, k2}
	case FCallSet:
		return []any{"FCALL", "cset", 0, k, in.Val}
	case EvalSwapDB:
		return []any{"EVAL", "return redis.call('SWAPDB', 0, 1)", 0}
	}
	panic("no single command for " + kindNames[in.Kind])
}

// since returns the time since start by the monotonic clock and by the
// wall clock (ns), read at one instant.
func since(start time.Time) (mono, wall int64) {
	now := time.Now()
	return int64(now.Sub(start)), now.UnixNano() - start.UnixNano()
}

// do sends in on rc and converts the reply. An error means the connection
// failed; Redis's error replies are outputs.
func do(rc *redis.Client, in Input) (Output, error) {
	ctx := context.Background()
	if in.Kind != Multi {
		return output(rc.Do(ctx, args(in)...).Result())
	}
	cmds, err := rc.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, b := range in.Batch {
			b.DB = in.DB
			p.Do(ctx, args(b)...)
		}
		return nil
	})
	if err != nil && !isReply(err) {
		return Output{}, err
	}
	out := Output{Items: []Output{}}
	for _, c := range cmds {
		o, err := output(c.(*redis.Cmd).Result())
		if err != nil {
			return Output{}, err
		}
		out.Items = append(out.Items, o)
	}
	return out, nil
}

func isReply(err error) bool {
	var re redis.Error
	return errors.Is(err, redis.Nil) || errors.As(err, &re)
}

func output(v any, err error) (Output, error) {
	switch {
	case errors.Is(err, redis.Nil):
		return Output{Nil: true}, nil
	case isReply(err):
		return Output{Err: err.Error()}, nil
	case err != nil:
		return Output{}, err
	}
	switch v := v.(type) {
	case string:
		return Output{Str: v}, nil
	case int64:
		return intOut(v), nil
	}
	return Output{}, fmt.Errorf("unexpected reply %T %v", v, v)
}
