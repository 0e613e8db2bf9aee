// A js-libp2p peer for tests/test_network_interop.py: TCP, Noise, yamux, identify, ping only.
//
//   node interop.mjs dial MULTIADDR [PINGS]  dial the peer, ping it, identify it; print one
//                                           JSON object and exit
//   node interop.mjs listen                 listen on 127.0.0.1, print {"peer_id", "addrs"},
//                                           then a JSON line per peer it identified; exit when
//                                           stdin closes
// Dependencies come from package-lock.json (scripts/test.sh runs `npm ci`); nothing is
// downloaded at run time.
import './node20.mjs'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { identify } from '@libp2p/identify'
import { ping } from '@libp2p/ping'
import { tcp } from '@libp2p/tcp'
import { multiaddr } from '@multiformats/multiaddr'
import { createLibp2p } from 'libp2p'

const [mode, target, pings = '5'] = process.argv.slice(2)
const say = (obj) => process.stdout.write(JSON.stringify(obj) + '\n')

const node = await createLibp2p({
  addresses: { listen: mode === 'listen' ? ['/ip4/127.0.0.1/tcp/0'] : [] },
  transports: [tcp()],
  connectionEncrypters: [noise()],
  streamMuxers: [yamux()],
  services: { identify: identify(), ping: ping() }
})

if (mode === 'dial') {
  try {
    const addr = multiaddr(target)
    const conn = await node.dial(addr)
    const rtts = []
    for (let i = 0; i < Number(pings); i++) {
      rtts.push(await node.services.ping.ping(addr))
    }
    const id = await node.services.identify.identify(conn)
    say({
      ok: true,
      peer_id: conn.remotePeer.toString(),
      encryption: conn.encryption,
      multiplexer: conn.multiplexer,
      rtt_ms: rtts,
      agent: id.agentVersion,
      protocol_version: id.protocolVersion,
      protocols: id.protocols,
      listen_addrs: id.listenAddrs.map(String),
      observed_addr: id.observedAddr?.toString() ?? null
    })
  } catch (err) {
    say({ ok: false, error: String(err?.stack ?? err) })
    process.exitCode = 1
  }
  await node.stop()
} else if (mode === 'listen') {
  node.addEventListener('peer:identify', (evt) => {
    const id = evt.detail
    say({
      event: 'identify',
      peer_id: id.peerId.toString(),
      agent: id.agentVersion,
      protocols: id.protocols,
      encryption: id.connection.encryption,
      multiplexer: id.connection.multiplexer
    })
  })
  say({
    event: 'listening',
    peer_id: node.peerId.toString(),
    agent: node.services.identify.host?.agentVersion ?? null,
    addrs: node.getMultiaddrs().map(String)
  })
  process.stdin.resume()
  process.stdin.on('end', async () => {
    await node.stop()
    process.exit(0)
  })
} else {
  process.stderr.write('usage: node interop.mjs dial MULTIADDR [PINGS] | listen\n')
  process.exit(2)
}
