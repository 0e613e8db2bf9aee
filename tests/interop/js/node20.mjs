// Node 20 lacks Promise.withResolvers (ES2024, Node >= 22), which it-queue (under libp2p's
// peer store) calls. This standard-conforming stand-in is imported before anything else.
if (typeof Promise.withResolvers !== 'function') {
  Promise.withResolvers = function withResolvers () {
    let resolve, reject
    const promise = new this((res, rej) => { resolve = res; reject = rej })
    return { promise, resolve, reject }
  }
}
