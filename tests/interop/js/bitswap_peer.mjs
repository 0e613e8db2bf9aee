// A stock IPFS block exchange for tests/interop/test_bitswap_interop.py: js-libp2p with
// Helia's bitswap (@helia/bitswap), the UnixFS importer and exporter IPFS in JavaScript uses.
//
//   node bitswap_peer.mjs fetch MULTIADDR CID  dial our node, fetch CID's whole DAG by bitswap
//                                             (each block asked of it), export the file and
//                                             print {"ok", "sha256", "size", "blocks"}
//   node bitswap_peer.mjs serve PATH MULTIADDR import PATH (a file) with `ipfs add
//                                             --cid-version 1`'s settings, serve it by
//                                             bitswap, dial our node (so that it can ask),
//                                             print {"peer_id", "cid"}; exit when stdin closes
// Dependencies come from package-lock.json (scripts/test.sh runs `npm ci`).
import './node20.mjs'
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { identify } from '@libp2p/identify'
import { defaultLogger } from '@libp2p/logger'
import { tcp } from '@libp2p/tcp'
import { multiaddr } from '@multiformats/multiaddr'
import { MemoryBlockstore } from 'blockstore-core/memory'
import { exporter } from 'ipfs-unixfs-exporter'
import { importer } from 'ipfs-unixfs-importer'
import { fixedSize } from 'ipfs-unixfs-importer/chunker'
import { balanced } from 'ipfs-unixfs-importer/layout'
import { createLibp2p } from 'libp2p'
import { CID } from 'multiformats/cid'
import { sha256 } from 'multiformats/hashes/sha2'
// The class itself: the package exports only its Helia mixin (withBitswap).
import { Bitswap } from './node_modules/@helia/bitswap/dist/src/bitswap.js'

const [mode, a, b] = process.argv.slice(2)
const say = (obj) => process.stdout.write(JSON.stringify(obj) + '\n')

const libp2p = await createLibp2p({
  addresses: { listen: mode === 'serve' ? ['/ip4/127.0.0.1/tcp/0'] : [] },
  transports: [tcp()],
  connectionEncrypters: [noise()],
  streamMuxers: [yamux()],
  services: { identify: identify() }
})
const blockstore = new MemoryBlockstore()
const routing = {
  async * findProviders () {},
  async provide () {},
  async cancelReprovide () {},
  async put () {},
  async get () { throw new Error('no routing') },
  async * findPeer () {},
  async * getClosestPeers () {}
}
const bitswap = new Bitswap({
  libp2p,
  blockstore,
  routing,
  logger: defaultLogger(),
  getHasher: async () => sha256
})
await bitswap.start()

if (mode === 'fetch') {
  try {
    const conn = await libp2p.dial(multiaddr(a))
    let blocks = 0
    const fetching = {
      // interface-blockstore 6: a block comes as an async iterable of its bytes.
      async * get (cid, options) {
        const block = await bitswap.want(cid, { ...options, providers: [conn.remotePeer] })
        blocks++
        yield block
      },
      async has (cid) { return blockstore.has(cid) }
    }
    const entry = await exporter(CID.parse(b), fetching, { signal: AbortSignal.timeout(60000) })
    const hash = createHash('sha256')
    let size = 0
    for await (const chunk of entry.content()) {
      hash.update(chunk)
      size += chunk.length
    }
    say({ ok: true, sha256: hash.digest('hex'), size, blocks })
  } catch (err) {
    say({ ok: false, error: String(err?.stack ?? err) })
    process.exitCode = 1
  }
  await bitswap.stop()
  await libp2p.stop()
  process.exit()
} else if (mode === 'serve') {
  let last
  for await (const entry of importer([{ path: 'file', content: readFileSync(a) }], blockstore, {
    cidVersion: 1,
    rawLeaves: true,
    chunker: fixedSize({ chunkSize: 262144 }),
    layout: balanced({ maxChildrenPerNode: 174 })
  })) {
    last = entry
  }
  await libp2p.dial(multiaddr(b))
  say({ peer_id: libp2p.peerId.toString(), cid: last.cid.toString() })
  process.stdin.resume()
  process.stdin.on('end', async () => {
    await bitswap.stop()
    await libp2p.stop()
    process.exit()
  })
}
