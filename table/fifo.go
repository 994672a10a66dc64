package table

// fifo is a queue on one backing array: popping advances a head index,
// and a push that finds the array full moves the live part to the front
// before growing it. A queue with a steady flow through it (a
// subscription's delivered events, its checkpoint candidates) then
// allocates nothing, where re-slicing the front off a slice gives up that
// room for good and makes append reallocate again and again.
type fifo[T any] struct {
	buf  []T // buf[head:] is the queue
	head int
}

func (q *fifo[T]) len() int { return len(q.buf) - q.head }

// at returns the i-th element from the front.
func (q *fifo[T]) at(i int) *T { return &q.buf[q.head+i] }

// back returns the last element; the queue must not be empty.
func (q *fifo[T]) back() *T { return &q.buf[len(q.buf)-1] }

func (q *fifo[T]) push(v T) {
	if len(q.buf) == cap(q.buf) && q.head > 0 {
		n := copy(q.buf, q.buf[q.head:])
		clear(q.buf[n:])
		q.buf, q.head = q.buf[:n], 0
	}
	q.buf = append(q.buf, v)
}

// popFront removes the first element; the queue must not be empty.
func (q *fifo[T]) popFront() {
	var zero T
	q.buf[q.head] = zero
	q.head++
	if q.head == len(q.buf) {
		q.buf, q.head = q.buf[:0], 0
	}
}

// popBack removes the last element; the queue must not be empty.
func (q *fifo[T]) popBack() {
	var zero T
	q.buf[len(q.buf)-1] = zero
	q.buf = q.buf[:len(q.buf)-1]
	if q.head == len(q.buf) {
		q.buf, q.head = q.buf[:0], 0
	}
}
