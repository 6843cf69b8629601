// Berth dashboard: live updates, log streaming and the actions that call
// the JSON API. No dependencies; every page works without it, except the
// live parts (logs, events, buttons).
(function () {
  'use strict';

  var main = document.getElementById('main');
  var flash = document.getElementById('flash');
  if (!main || !document.body.dataset.events) {
    return; // the sign-in page
  }

  // say shows a message in the status region (read out by screen readers).
  function say(text, isError) {
    if (!flash) return;
    flash.textContent = text;
    flash.className = isError ? 'error' : 'ok';
  }

  // apiError turns a failed API answer into a sentence.
  function apiError(resp) {
    return resp.text().then(function (body) {
      try {
        var e = JSON.parse(body).error;
        if (e && e.message) return (e.field ? e.field + ': ' : '') + e.message;
      } catch (ignored) { /* not JSON */ }
      return resp.status + ' ' + resp.statusText;
    });
  }

  // call sends a same-origin API request (the sign-in cookie, or loopback
  // trust, authenticates it) and resolves with the parsed JSON answer.
  function call(method, url, body) {
    var opts = { method: method, credentials: 'same-origin', headers: {} };
    if (body !== undefined) {
      opts.headers['Content-Type'] = 'application/json';
      opts.body = typeof body === 'string' ? body : JSON.stringify(body);
    }
    return fetch(url, opts).then(function (resp) {
      if (!resp.ok) {
        return apiError(resp).then(function (msg) { throw new Error(msg); });
      }
      return resp.json();
    });
  }

  // --- Live refresh of the main section ---------------------------------

  var lastRefresh = 0;
  var timer = null;
  var deferred = false;

  // editing reports whether the user is typing or choosing in the main
  // section: a refresh then would throw their input away.
  function editing() {
    var a = document.activeElement;
    return a && main.contains(a) && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName);
  }

  // schedule asks for a refresh, at most one a second.
  function schedule() {
    if (timer) return;
    var wait = Math.max(0, 1000 - (Date.now() - lastRefresh));
    timer = setTimeout(refresh, wait);
  }

  function refresh() {
    timer = null;
    if (document.hidden || editing()) {
      deferred = true;
      return;
    }
    deferred = false;
    lastRefresh = Date.now();
    var url = new URL(window.location.href);
    url.searchParams.set('fragment', 'main');
    fetch(url.toString(), { credentials: 'same-origin', headers: { Accept: 'text/html' } })
      .then(function (resp) {
        if (resp.redirected && new URL(resp.url).pathname === '/login') {
          window.location.reload(); // signed out meanwhile: to the sign-in page
          return null;
        }
        return resp.ok ? resp.text() : null;
      })
      .then(function (html) { if (html !== null) swap(html); })
      .catch(function () { /* offline: the next event or tick retries */ });
  }

  // swap replaces the main section with html, keeping the elements marked
  // data-keep (a streaming log, the event list) as they are.
  function swap(html) {
    var tpl = document.createElement('template');
    tpl.innerHTML = html;
    var fresh = tpl.content;
    fresh.querySelectorAll('[data-keep][id]').forEach(function (node) {
      var old = document.getElementById(node.id);
      if (old) node.replaceWith(old);
    });
    main.replaceChildren(fresh);
    countdowns();
  }

  document.addEventListener('visibilitychange', function () {
    if (!document.hidden && deferred) schedule();
  });
  document.addEventListener('focusout', function () {
    if (deferred) setTimeout(function () { if (!editing()) schedule(); }, 0);
  });
  // Changes that send no event (the swap lock, the schedule registry)
  // show within this.
  setInterval(schedule, 15000);

  // --- Server-sent events -----------------------------------------------

  var eventRows = document.querySelector('#events tbody');
  var eventsStatus = document.getElementById('events-status');
  var maxEventRows = 500;

  function cell(row, text, header) {
    var c = document.createElement(header ? 'th' : 'td');
    if (header) c.scope = 'row';
    if (text instanceof Node) c.appendChild(text); else c.textContent = text || '';
    row.appendChild(c);
  }

  // showEvent adds one event at the top of the events page's table.
  function showEvent(type, data) {
    var e = {};
    try { e = JSON.parse(data); } catch (ignored) { /* keep the type */ }
    var row = document.createElement('tr');
    cell(row, e.seq ? String(e.seq) : '', true);
    cell(row, e.time ? new Date(e.time).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '');
    cell(row, type);
    if (e.job_id) {
      var a = document.createElement('a');
      a.href = '/jobs/' + encodeURIComponent(e.job_id);
      a.textContent = e.job_id;
      cell(row, a);
    } else {
      cell(row, '');
    }
    cell(row, e.host || '');
    var details = [];
    ['state', 'reason', 'queue', 'desired', 'policy', 'quota', 'limits', 'user', 'actor', 'missed'].forEach(function (k) {
      if (e[k] !== undefined && e[k] !== '') details.push(k + '=' + e[k]);
    });
    cell(row, details.join(' '));
    eventRows.insertBefore(row, eventRows.firstChild);
    while (eventRows.rows.length > maxEventRows) eventRows.deleteRow(-1);
  }

  if (window.EventSource) {
    var src = '/api/v1/events';
    if (eventRows && eventRows.dataset.after) src += '?after=' + encodeURIComponent(eventRows.dataset.after);
    var es = new EventSource(src);
    var onEvent = function (ev) {
      if (eventRows) showEvent(ev.type, ev.data);
      else schedule();
    };
    document.body.dataset.events.split(' ').forEach(function (type) {
      if (type) es.addEventListener(type, onEvent);
    });
    // The server's numbering restarted: the stream replays what it keeps.
    es.addEventListener('reset', onEvent);
    es.onmessage = onEvent;
    es.onopen = function () {
      if (eventsStatus) eventsStatus.textContent = 'Live.';
    };
    es.onerror = function () {
      if (eventsStatus) eventsStatus.textContent = 'Disconnected; reconnecting…';
    };
  }

  // --- Swap lock countdown ----------------------------------------------

  function fmt(secs) {
    if (secs < 60) return secs + 's';
    if (secs < 3600) return Math.floor(secs / 60) + 'm ' + (secs % 60) + 's';
    return Math.floor(secs / 3600) + 'h ' + Math.floor((secs % 3600) / 60) + 'm';
  }

  function countdowns() {
    document.querySelectorAll('[data-expires]').forEach(function (el) {
      var left = Math.ceil((Date.parse(el.dataset.expires) - Date.now()) / 1000);
      if (left > 0) {
        el.textContent = fmt(left);
      } else {
        el.textContent = 'expired';
        schedule();
      }
    });
  }
  countdowns();
  setInterval(countdowns, 1000);

  // --- Actions ----------------------------------------------------------

  document.addEventListener('click', function (ev) {
    var btn = ev.target.closest('button[data-action]');
    if (!btn) return;
    var action = btn.dataset.action;
    if (action === 'force-release') {
      if (!window.confirm('Force-release the swap lock ' + btn.dataset.holder + ' holds?')) return;
      btn.disabled = true;
      call('DELETE', '/api/swap/lock?force=true').then(function (r) {
        say(r.released ? 'Swap lock released.' : 'The swap lock was not held any more.');
        schedule();
      }, function (err) {
        btn.disabled = false;
        say('Could not release the swap lock: ' + err.message, true);
      });
    } else if (action === 'cancel') {
      if (!window.confirm('Cancel job ' + btn.dataset.job + '?')) return;
      btn.disabled = true;
      call('POST', '/api/v1/jobs/' + encodeURIComponent(btn.dataset.job) + '/cancel').then(function () {
        say('Cancel requested for ' + btn.dataset.job + '.');
        schedule();
      }, function (err) {
        btn.disabled = false;
        say('Could not cancel: ' + err.message, true);
      });
    } else if (action === 'resubmit') {
      btn.disabled = true;
      call('POST', '/api/v1/jobs', btn.dataset.spec).then(function (r) {
        var id = r.jobs && r.jobs[0] && r.jobs[0].id;
        say('Submitted ' + id + '.');
        if (id) window.location.href = '/jobs/' + encodeURIComponent(id);
      }, function (err) {
        btn.disabled = false;
        say('Could not resubmit: ' + err.message, true);
      });
    }
  });

  document.addEventListener('submit', function (ev) {
    var form = ev.target;
    if (!form.matches('form.control')) return;
    ev.preventDefault();
    var state = ev.submitter ? ev.submitter.value : 'off';
    var host = form.dataset.host;
    var body = { queue: form.elements.queue.value, desired_state: state };
    if (state === 'off') body.stop_policy = form.elements.stop_policy.value;
    var what = (body.queue === '*' ? 'every queue' : 'queue ' + body.queue) + ' of ' + host;
    call('PUT', '/api/v1/workers/' + encodeURIComponent(host) + '/control', body).then(function (r) {
      var stopping = r.stopping && r.stopping.length ? ' (stopping ' + r.stopping.length + ' attempts)' : '';
      say('Turned ' + state + ' ' + what + stopping + '.');
      schedule();
    }, function (err) {
      say('Could not turn ' + state + ' ' + what + ': ' + err.message, true);
    });
  });

  // --- Job output -------------------------------------------------------

  var log = document.getElementById('log');
  if (log && log.dataset.src) {
    var filter = document.getElementById('log-filter');
    var status = document.getElementById('log-status');
    var maxLines = 20000;
    var lines = [];
    var partial = '';
    var dropped = 0;
    var pending = false;

    var render = function () {
      pending = false;
      var atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 40;
      var needle = filter && filter.value ? filter.value.toLowerCase() : '';
      var shown = lines.concat(partial ? [partial] : []);
      if (needle) {
        shown = shown.filter(function (l) { return l.toLowerCase().indexOf(needle) >= 0; });
      }
      log.textContent = shown.join('\n');
      if (atBottom) log.scrollTop = log.scrollHeight;
    };
    var later = function () {
      if (!pending) {
        pending = true;
        window.requestAnimationFrame(render);
      }
    };
    var add = function (text) {
      var parts = (partial + text).split('\n');
      partial = parts.pop();
      Array.prototype.push.apply(lines, parts);
      if (lines.length > maxLines) {
        dropped += lines.length - maxLines;
        lines.splice(0, lines.length - maxLines);
        status.textContent = 'Showing the last ' + maxLines + ' lines (' + dropped + ' earlier ones: download the output).';
      }
      later();
    };
    if (filter) filter.addEventListener('input', later);
    status.textContent = 'Streaming…';
    fetch(log.dataset.src, { credentials: 'same-origin' }).then(function (resp) {
      if (!resp.ok) {
        return apiError(resp).then(function (msg) { status.textContent = 'Output unavailable: ' + msg; });
      }
      var reader = resp.body.getReader();
      var dec = new TextDecoder();
      var pump = function () {
        return reader.read().then(function (chunk) {
          if (chunk.done) {
            add(dec.decode());
            if (!dropped) status.textContent = 'End of output (the job has ended).';
            return null;
          }
          add(dec.decode(chunk.value, { stream: true }));
          return pump();
        });
      };
      return pump();
    }).catch(function (err) {
      status.textContent = 'Output stream interrupted: ' + err.message;
    });
  }
})();
