'use strict'
// nsqjs driver for the nsqmp compatibility tests: the same arguments and the same
// JSON-lines events as the Python drivers (see tests/compat/drivers/cli.py).
const nsq = require('nsqjs')

const MPUB_BATCH = 100
const GRACE_MS = 500

function parseArgs(argv) {
  const args = {channel: 'compat', count: 1, prefix: 'm', heartbeatMs: 30000, msgTimeoutMs: 0,
    authSecret: '', deniedTopic: '', deadline: 60, tls: false, snappy: false, deflate: false}
  const names = {'--address': 'address', '--scenario': 'scenario', '--topic': 'topic', '--channel': 'channel',
    '--count': 'count', '--prefix': 'prefix', '--heartbeat-ms': 'heartbeatMs', '--msg-timeout-ms': 'msgTimeoutMs',
    '--auth-secret': 'authSecret', '--denied-topic': 'deniedTopic', '--deadline': 'deadline'}
  const numbers = new Set(['count', 'heartbeatMs', 'msgTimeoutMs', 'deadline'])
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]
    if (flag === '--tls' || flag === '--snappy' || flag === '--deflate') {
      args[flag.slice(2)] = true
    } else if (names[flag]) {
      const key = names[flag]
      args[key] = numbers.has(key) ? Number(argv[++i]) : argv[++i]
    } else {
      throw new Error(`unknown argument ${flag}`)
    }
  }
  return args
}

function emit(event, fields = {}) {
  process.stdout.write(JSON.stringify({event, ...fields}) + '\n')
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

async function waitUntil(predicate, deadline) {
  while (!predicate()) {
    if (Date.now() > deadline) return false
    await sleep(20)  // the client's own polling, its library runs meanwhile
  }
  return true
}

function stdinLine() {
  return new Promise((resolve) => {
    process.stdin.once('data', resolve)
    process.stdin.once('end', resolve)
  })
}

function connOptions(args) {
  const opts = {heartbeatInterval: Math.max(1, Math.floor(args.heartbeatMs / 1000))}
  if (args.tls) Object.assign(opts, {tls: true, tlsVerification: false})
  if (args.snappy) opts.snappy = true
  if (args.deflate) Object.assign(opts, {deflate: true, deflateLevel: 6})
  if (args.msgTimeoutMs) opts.messageTimeout = args.msgTimeoutMs
  if (args.authSecret) opts.authSecret = args.authSecret
  return opts
}

function bodies(args) {
  const out = []
  for (let i = 0; i < args.count; i++) out.push(`${args.prefix}-${String(i).padStart(6, '0')}`)
  return out
}

function connectedWriter(args) {
  const [host, port] = splitAddress(args.address)
  const writer = new nsq.Writer(host, port, connOptions(args))
  return new Promise((resolve, reject) => {
    writer.once('ready', () => resolve(writer))
    writer.once('error', reject)
    writer.connect()
  })
}

function splitAddress(address) {
  const i = address.lastIndexOf(':')
  return [address.slice(0, i), Number(address.slice(i + 1))]
}

function publishOne(writer, topic, msgs) {
  return new Promise((resolve) => writer.publish(topic, msgs, (err) => resolve(err ? String(err) : null)))
}

// PUB the first tenth, MPUB the rest in batches; every publish in flight at once.
async function publish(writer, topic, all) {
  const nPub = Math.floor(all.length / 10)
  const pending = []
  for (const body of all.slice(0, nPub)) pending.push(publishOne(writer, topic, body))
  for (let i = nPub; i < all.length; i += MPUB_BATCH) pending.push(publishOne(writer, topic, all.slice(i, i + MPUB_BATCH)))
  return (await Promise.all(pending)).filter((e) => e !== null)
}

function reader(args, topic, maxInFlight) {
  return new nsq.Reader(topic, args.channel, {nsqdTCPAddresses: [args.address], maxInFlight, ...connOptions(args)})
}

async function roundtrip(args) {
  const deadline = Date.now() + args.deadline * 1000
  const expected = bodies(args)
  const got = []
  const attempts = {}
  const distinct = new Set()
  const r = reader(args, args.topic, 200)
  r.on('message', (msg) => {
    const body = msg.body.toString()
    got.push(body)
    distinct.add(body)
    attempts[msg.attempts] = (attempts[msg.attempts] || 0) + 1
    msg.finish()
  })
  r.on('error', (err) => process.stderr.write(`reader error: ${err}\n`))
  r.connect()
  const writer = await connectedWriter(args)
  const errors = await publish(writer, args.topic, expected)
  emit('published', {count: expected.length, errors})
  await waitUntil(() => distinct.size >= expected.length, deadline)
  await sleep(GRACE_MS)  // a late duplicate would arrive now: the time is what is tested
  emit('received', {bodies: got, attempts})
  emit('holding')
  await stdinLine()
  r.close()
  writer.close()
}

async function redelivery(args) {
  const deadline = Date.now() + args.deadline * 1000
  const t0 = Date.now()
  const items = []
  const finished = new Set()
  const held = []
  const r = reader(args, args.topic, 10)
  r.on('message', (msg) => {
    const body = msg.body.toString()
    const t = (Date.now() - t0) / 1000
    if (msg.attempts >= 2) {
      items.push({body, attempts: msg.attempts, action: 'fin', t})
      finished.add(body)
      msg.finish()
    } else if (args.scenario === 'requeue') {
      items.push({body, attempts: msg.attempts, action: 'req', t})
      msg.requeue(0, false)
    } else {
      items.push({body, attempts: msg.attempts, action: 'hold', t})
      held.push(msg) // never answered: the broker must time it out
    }
  })
  r.on('error', (err) => process.stderr.write(`reader error: ${err}\n`))
  r.connect()
  const writer = await connectedWriter(args)
  const errors = await publish(writer, args.topic, bodies(args))
  await waitUntil(() => finished.size >= args.count, deadline)
  await sleep(GRACE_MS)  // a late duplicate would arrive now: the time is what is tested
  emit('deliveries', {items, errors})
  r.close()
  writer.close()
}

async function heartbeat(args) {
  const r = reader(args, args.topic, 1)
  r.on('message', (msg) => msg.finish())
  const ready = new Promise((resolve) => r.once('nsqd_connected', resolve))
  r.connect()
  await ready
  emit('subscribed')
  await stdinLine()
  r.close()
}

async function auth(args) {
  const result = {}
  for (const [key, topic] of [['pub_allowed', args.topic], ['pub_denied', args.deniedTopic]]) {
    let writer
    try {
      writer = await connectedWriter(args)
      const err = await Promise.race([publishOne(writer, topic, 'secret-body'),
        new Promise((resolve) => writer.once('error', (e) => resolve(String(e))))])
      result[key] = err === null ? 'OK' : err
    } catch (e) {
      result[key] = String(e)
    }
    if (writer) writer.close()
  }
  for (const [key, topic] of [['sub_allowed', args.topic], ['sub_denied', args.deniedTopic]]) {
    const got = []
    const errors = []
    const r = reader(args, topic, 1)
    r.on('message', (msg) => { got.push(msg.body.toString()); msg.finish() })
    r.on('error', (err) => errors.push(String(err)))
    r.connect()
    await waitUntil(() => got.length > 0 || errors.length > 0, Date.now() + 5000)
    result[key] = {received: got, errors}
    r.close()
  }
  emit('auth', result)
}

async function main() {
  const args = parseArgs(process.argv.slice(2))
  const scenario = {roundtrip, requeue: redelivery, timeout: redelivery, heartbeat, auth}[args.scenario]
  if (!scenario) throw new Error(`unknown scenario ${args.scenario}`)
  await scenario(args)
  emit('done')
  // nsqjs keeps timers (reconnects, RDY) alive after close; the scenario is over
  setTimeout(() => process.exit(0), 200)
}

main().catch((err) => {
  process.stderr.write(`${err && err.stack ? err.stack : err}\n`)
  process.exit(1)
})
