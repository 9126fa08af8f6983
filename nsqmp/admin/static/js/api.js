// Talking to the admin's JSON API: every URL is built from the base path the server
// put in index.html, and every mutating request carries the CSRF token it put there.

function meta(name) {
  const el = document.querySelector(`meta[name="${name}"]`);
  return el ? el.getAttribute('content') : '';
}

/** The server's --base-path without a trailing slash ("" at the root). */
export const basePath = filled(meta('nsqmp-base-path')).replace(/\/+$/, '');
const csrfToken = filled(meta('nsqmp-csrf-token'));

// index.html opened without the server's substitution still works at the root.
function filled(value) {
  return value && !value.startsWith('__NSQMP_') ? value : '';
}

/** A page or static URL under the base path: url('/topics', name) -> "/bp/topics/name". */
export function url(path, ...segments) {
  // ':' stays as it is, so a broker's page reads /nodes/host:port as in nsqadmin.
  const tail = segments.map((seg) => '/' + encodeURIComponent(seg).replace(/%3A/gi, ':')).join('');
  return basePath + path + tail;
}

/** An API URL: apiUrl('/topics', topic, channel) -> "/bp/api/topics/<topic>/<channel>". */
export function apiUrl(path, ...segments) {
  return url('/api' + path, ...segments);
}

/** An error the API answered with: status and its message. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function request(method, path, body) {
  const init = {method, headers: {Accept: 'application/json'}, credentials: 'same-origin'};
  if (method !== 'GET') {
    init.headers['X-NSQMP-CSRF-Token'] = csrfToken;
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (err) {
    throw new ApiError(0, `the admin server did not answer (${err.message})`);
  }
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : {}; } catch { data = {message: text}; }
  if (!resp.ok) {
    throw new ApiError(resp.status, (data && data.message) || `${resp.status} ${resp.statusText}`);
  }
  return data;
}

/** GET an API path (built with apiUrl). */
export const get = (path) => request('GET', path);
/** POST a JSON body with the CSRF token. */
export const post = (path, body) => request('POST', path, body);
/** DELETE with the CSRF token. */
export const del = (path, body) => request('DELETE', path, body);
