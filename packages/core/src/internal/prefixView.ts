/**
 * A read-only view of the first `length` items of an append-only array, made in O(1): the
 * `messages` of each `ModelRequest` (design 0211). The loop keeps one history array and only
 * appends to it, so the items below `length` never change and the view is a value: a client that
 * keeps a request sees the same messages forever, while the loop pays nothing per step for it
 * (a copy would cost the history's length at every step).
 *
 * It is an `Array` to every reader — `Array.isArray`, indexing, `length`, iteration, `map`,
 * `slice`, spread, `JSON.stringify` — and refuses every write (`push`, index assignment,
 * `length =`, `delete`) with a `TypeError`. `structuredClone` does not accept a Proxy: copy it
 * first (`[...request.messages]`).
 *
 * @internal
 */

const indexOf = (key: string | symbol): number | undefined => {
  if (typeof key !== "string") return undefined
  const index = Number(key)
  return Number.isInteger(index) && index >= 0 && String(index) === key ? index : undefined
}

const refuse = (): never => {
  throw new TypeError("a ModelRequest's messages are read-only (copy them to change them)")
}

/** The first `length` items of `items` (all of them by default), as a read-only array. @internal */
export const prefix = <A>(items: Array<A>, length: number = items.length): ReadonlyArray<A> =>
  new Proxy(items, new Concat<A>(length, noItems, 0, 0))

const noItems: ReadonlyArray<never> = []

/**
 * The traps of a view over two arrays: `head[0, headLength)` then `tail[tailStart, tailEnd)`
 * (a prefix view is one with an empty tail). Its bounds are its only state: one small object per
 * view.
 */
class Concat<A> implements ProxyHandler<Array<A>> {
  readonly length: number
  constructor(readonly headLength: number, readonly tail: ReadonlyArray<A>, readonly tailStart: number, tailEnd: number) {
    this.length = headLength + (tailEnd - tailStart)
  }
  item(target: Array<A>, index: number): A | undefined {
    if (index >= this.length) return undefined
    return index < this.headLength ? target[index] : this.tail[this.tailStart + index - this.headLength]
  }
  get(target: Array<A>, key: string | symbol, receiver: unknown): unknown {
    if (key === "length") return this.length
    const index = indexOf(key)
    if (index !== undefined) return this.item(target, index)
    return Reflect.get(target, key, receiver)
  }
  has(target: Array<A>, key: string | symbol): boolean {
    const index = indexOf(key)
    return index !== undefined ? index < this.length : Reflect.has(target, key)
  }
  ownKeys(): Array<string> {
    return [...Array.from({ length: this.length }, (_, index) => String(index)), "length"]
  }
  getOwnPropertyDescriptor(target: Array<A>, key: string | symbol): PropertyDescriptor | undefined {
    if (key === "length") return { value: this.length, writable: true, enumerable: false, configurable: false }
    const index = indexOf(key)
    if (index === undefined) return Reflect.getOwnPropertyDescriptor(target, key)
    return index < this.length ? { value: this.item(target, index), writable: false, enumerable: true, configurable: true } : undefined
  }
  set(): boolean {
    return refuse()
  }
  defineProperty(): boolean {
    return refuse()
  }
  deleteProperty(): boolean {
    return refuse()
  }
  setPrototypeOf(): boolean {
    return refuse()
  }
}

/**
 * `head[0, headLength)` followed by `tail[tailStart, tailEnd)`, as one read-only array made in
 * O(1) (design 0300: a masked history is its masked part, append-only, and the verbatim rest of
 * the history, append-only too). Both arrays must only ever be appended to. @internal
 */
export const concat = <A>(head: Array<A>, headLength: number, tail: ReadonlyArray<A>, tailStart: number, tailEnd: number): ReadonlyArray<A> =>
  new Proxy(head, new Concat<A>(headLength, tail, tailStart, tailEnd))
