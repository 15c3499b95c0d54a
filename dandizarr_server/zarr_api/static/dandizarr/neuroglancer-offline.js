// Neuroglancer's client as the neuroglancer Python package builds it keeps an EventSource open
// to ../events/<token>, the channel of a Python kernel that drives the viewer; without one it
// shows "Disconnected from Python server" and retries for ever. This service is no such
// kernel: the viewer's state comes from the URL fragment. So the page gives that one channel
// a source that opens and stays quiet; every other EventSource is the browser's own.
// (docs/neuroglancer.md)
(function () {
  "use strict";
  var BrowserEventSource = window.EventSource;

  function QuietEventSource(url) {
    var self = this;
    this.url = String(url);
    this.withCredentials = false;
    this.readyState = 0;
    this.onopen = null;
    this.onmessage = null;
    this.onerror = null;
    this._listeners = {};
    window.setTimeout(function () {
      if (self.readyState !== 0) {
        return;
      }
      self.readyState = 1;
      self.dispatchEvent(new Event("open"));
    }, 0);
  }
  QuietEventSource.prototype.addEventListener = function (type, listener) {
    (this._listeners[type] = this._listeners[type] || []).push(listener);
  };
  QuietEventSource.prototype.removeEventListener = function (type, listener) {
    var list = this._listeners[type] || [];
    var at = list.indexOf(listener);
    if (at >= 0) {
      list.splice(at, 1);
    }
  };
  QuietEventSource.prototype.dispatchEvent = function (event) {
    var handler = this["on" + event.type];
    if (typeof handler === "function") {
      handler.call(this, event);
    }
    (this._listeners[event.type] || []).slice().forEach(function (listener) {
      listener.call(this, event);
    }, this);
    return true;
  };
  QuietEventSource.prototype.close = function () {
    this.readyState = 2;
  };
  QuietEventSource.CONNECTING = 0;
  QuietEventSource.OPEN = 1;
  QuietEventSource.CLOSED = 2;

  function isKernelChannel(url) {
    var path = new URL(String(url), window.location.href).pathname;
    return /\/neuroglancer\/events\/[^/]+$/.test(path);
  }

  window.EventSource = function (url, options) {
    if (isKernelChannel(url)) {
      return new QuietEventSource(url);
    }
    return new BrowserEventSource(url, options);
  };
  window.EventSource.CONNECTING = 0;
  window.EventSource.OPEN = 1;
  window.EventSource.CLOSED = 2;
})();
