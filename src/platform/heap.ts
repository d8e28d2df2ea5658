// One min-heap for every part that needs one (lease deadlines in the broker, replay frontiers in
// the checker, the simulator's event queue). Entries are (key, value, aux) triples kept in three
// parallel arrays, so a push allocates nothing per entry on the broker's lease path; `aux` is a
// second number for entries that need two (a lease's offset and delivery tag). Ties between equal
// keys come out in no particular order.

export class MinHeap<T> {
  private readonly keys: number[] = [];
  private readonly values: T[] = [];
  private readonly auxes: number[] = [];

  get size(): number {
    return this.keys.length;
  }

  /** The smallest key, or Infinity when empty. */
  peekKey(): number {
    return this.keys.length > 0 ? this.keys[0]! : Infinity;
  }

  /** The value of the smallest key; undefined when empty. */
  peekValue(): T | undefined {
    return this.values[0];
  }

  /** The aux number of the smallest key; NaN when empty. */
  peekAux(): number {
    return this.auxes.length > 0 ? this.auxes[0]! : NaN;
  }

  push(key: number, value: T, aux = 0): void {
    const k = this.keys;
    k.push(key);
    this.values.push(value);
    this.auxes.push(aux);
    let i = k.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (k[parent]! <= k[i]!) break;
      this.swap(i, parent);
      i = parent;
    }
  }

  /** Removes the smallest entry (read it first with the peek methods); a no-op when empty. */
  pop(): void {
    const k = this.keys;
    if (k.length === 0) return;
    const last = k.length - 1;
    this.swap(0, last);
    k.pop();
    this.values.pop();
    this.auxes.pop();
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < k.length && k[l]! < k[m]!) m = l;
      if (r < k.length && k[r]! < k[m]!) m = r;
      if (m === i) break;
      this.swap(i, m);
      i = m;
    }
  }

  clear(): void {
    this.keys.length = 0;
    this.values.length = 0;
    this.auxes.length = 0;
  }

  private swap(i: number, j: number): void {
    const k = this.keys;
    const key = k[i]!;
    k[i] = k[j]!;
    k[j] = key;
    const v = this.values;
    const value = v[i]!;
    v[i] = v[j]!;
    v[j] = value;
    const a = this.auxes;
    const aux = a[i]!;
    a[i] = a[j]!;
    a[j] = aux;
  }
}
