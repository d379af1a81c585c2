// rxjs/operators as an ES module, for the browser: rxjs publishes no ES build a browser can load
// as is (its ES files import each other without file extensions), so index.html loads
// its UMD bundle (node_modules/rxjs/dist/bundles/rxjs.umd.min.js), which defines the
// global `rxjs`, and the import map points "rxjs/operators" here. Every name rxjs 7 exports.
export const {
  audit, auditTime, buffer, bufferCount, bufferTime, bufferToggle, bufferWhen,
  catchError, combineAll, combineLatest, combineLatestAll, combineLatestWith, concat,
  concatAll, concatMap, concatMapTo, concatWith, connect, count, debounce,
  debounceTime, defaultIfEmpty, delay, delayWhen, dematerialize, distinct,
  distinctUntilChanged, distinctUntilKeyChanged, elementAt, endWith, every, exhaust,
  exhaustAll, exhaustMap, expand, filter, finalize, find, findIndex, first, flatMap,
  groupBy, ignoreElements, isEmpty, last, map, mapTo, materialize, max, merge,
  mergeAll, mergeMap, mergeMapTo, mergeScan, mergeWith, min, multicast, observeOn,
  onErrorResumeNext, pairwise, partition, pluck, publish, publishBehavior, publishLast,
  publishReplay, race, raceWith, reduce, refCount, repeat, repeatWhen, retry,
  retryWhen, sample, sampleTime, scan, sequenceEqual, share, shareReplay, single, skip,
  skipLast, skipUntil, skipWhile, startWith, subscribeOn, switchAll, switchMap,
  switchMapTo, switchScan, take, takeLast, takeUntil, takeWhile, tap, throttle,
  throttleTime, throwIfEmpty, timeInterval, timeout, timeoutWith, timestamp, toArray,
  window, windowCount, windowTime, windowToggle, windowWhen, withLatestFrom, zip,
  zipAll, zipWith,
} = globalThis.rxjs.operators;
