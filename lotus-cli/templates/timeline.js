// lotus report: zoom (wheel) and pan (drag) of each timeline, and its
// Reset button. Each span carries its start and duration (ms, data-s and
// data-d); the view [t0, t1] maps them onto the drawing's width.
(function () {
  "use strict";
  function niceStep(span) {
    var raw = span / 8, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var steps = [1, 2, 5, 10];
    for (var i = 0; i < steps.length; i++) { if (steps[i] * mag >= raw) { return steps[i] * mag; } }
    return 10 * mag;
  }
  function setUp(tl) {
    var full = parseFloat(tl.dataset.duration), width = parseFloat(tl.dataset.width);
    var plot = tl.querySelector(".tl-plot"), svg = tl.querySelector(".tl-svg");
    var axis = tl.querySelector(".tl-axis"), rects = svg.querySelectorAll("rect");
    if (!(full > 0) || !plot || !svg) { return; }
    var spans = Array.prototype.map.call(rects, function (r) {
      return [r, parseFloat(r.dataset.s), parseFloat(r.dataset.d)];
    });
    var t0 = 0, t1 = full;
    function draw() {
      var k = width / (t1 - t0), i, s;
      for (i = 0; i < spans.length; i++) {
        s = spans[i];
        s[0].setAttribute("x", ((s[1] - t0) * k).toFixed(3));
        s[0].setAttribute("width", Math.max(s[2] * k, 0.2).toFixed(3));
      }
      var step = niceStep(t1 - t0), html = [], t;
      for (t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
        var label = step >= 1000 ? (t / 1000).toFixed(0) + " s" : step >= 1 ? t.toFixed(0) + " ms" : t.toFixed(2) + " ms";
        var span = document.createElement("span");
        span.style.left = (100 * (t - t0) / (t1 - t0)) + "%";
        span.textContent = label;
        html.push(span);
      }
      axis.replaceChildren.apply(axis, html);
      tl.dataset.view = t0.toFixed(4) + "," + t1.toFixed(4);
    }
    function clamp() {
      var span = Math.min(Math.max(t1 - t0, full / 1e6), full);
      if (t0 < 0) { t0 = 0; }
      t1 = t0 + span;
      if (t1 > full) { t1 = full; t0 = full - span; }
    }
    plot.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      var box = plot.getBoundingClientRect();
      var at = t0 + (t1 - t0) * Math.min(Math.max((ev.clientX - box.left) / box.width, 0), 1);
      var f = ev.deltaY > 0 ? 1.25 : 0.8;
      t0 = at - (at - t0) * f;
      t1 = at + (t1 - at) * f;
      clamp();
      draw();
    }, { passive: false });
    var dragFrom = null;
    plot.addEventListener("pointerdown", function (ev) {
      dragFrom = [ev.clientX, t0, t1];
      try {
        plot.setPointerCapture(ev.pointerId);
      } catch (e) {
        // A pointer the browser no longer knows: the drag works without.
      }
      plot.style.cursor = "grabbing";
    });
    plot.addEventListener("pointermove", function (ev) {
      if (!dragFrom) { return; }
      var box = plot.getBoundingClientRect();
      var dt = (ev.clientX - dragFrom[0]) / box.width * (dragFrom[2] - dragFrom[1]);
      t0 = dragFrom[1] - dt;
      t1 = dragFrom[2] - dt;
      clamp();
      draw();
    });
    function stop() { dragFrom = null; plot.style.cursor = ""; }
    plot.addEventListener("pointerup", stop);
    plot.addEventListener("pointercancel", stop);
    tl.querySelector(".tl-reset").addEventListener("click", function () {
      t0 = 0;
      t1 = full;
      draw();
    });
    draw();
  }
  Array.prototype.forEach.call(document.querySelectorAll(".timeline"), setUp);
})();
