// The reference UnixFS importer (ipfs-unixfs-importer, what Helia and js-ipfs add with),
// with the settings of `ipfs add --cid-version 1`: 256 KiB chunks, raw leaves, a balanced
// DAG of 174 links a node. Prints {"cid": root, "blocks": n} for the file or folder named by
// argv[2] (a folder's hidden entries left out, as `ipfs add -r` does without --hidden).
// tests/data/test_unixfs_interop.py compares it with engine/data/unixfs.py.
import { importer } from 'ipfs-unixfs-importer'
import { fixedSize } from 'ipfs-unixfs-importer/chunker'
import { balanced } from 'ipfs-unixfs-importer/layout'
import { MemoryBlockstore } from 'blockstore-core/memory'
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { basename, join } from 'node:path'

function * entries (path, name) {
  const stat = statSync(path)
  if (stat.isDirectory()) {
    yield { path: name }
    for (const child of readdirSync(path).sort()) {
      if (!child.startsWith('.')) yield * entries(join(path, child), `${name}/${child}`)
    }
  } else {
    yield { path: name, content: readFileSync(path) }
  }
}

const root = process.argv[2]
const blockstore = new MemoryBlockstore()
let last
for await (const entry of importer(entries(root, basename(root)), blockstore, {
  cidVersion: 1,
  rawLeaves: true,
  chunker: fixedSize({ chunkSize: 262144 }),
  layout: balanced({ maxChildrenPerNode: 174 }),
  wrapWithDirectory: false
})) {
  last = entry
}
let blocks = 0
for await (const _ of blockstore.getAll()) blocks++
console.log(JSON.stringify({ cid: last.cid.toString(), blocks }))
