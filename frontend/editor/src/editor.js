// The session page's shared editor: CodeMirror 6 bound to a Yjs document.
//
// Bundled by esbuild into one IIFE (dist/editor.js) that defines
// `window.TandemEditor`; the Leptos app calls it through wasm_bindgen.
// The app owns the transport: local Yjs and awareness updates leave through
// the `onUpdate` / `onAwareness` callbacks, and remote ones come in through
// `applyUpdate` / `applyAwareness`. The shared text is
// `doc.getText('content')`, the same name the server (yrs) uses.

import { basicSetup, EditorView } from 'codemirror'
import { Compartment, EditorState, Prec } from '@codemirror/state'
import { keymap } from '@codemirror/view'
import { StreamLanguage } from '@codemirror/language'
import * as Y from 'yjs'
import { yCollab, yUndoManagerKeymap } from 'y-codemirror.next'
import {
  Awareness,
  applyAwarenessUpdate,
  encodeAwarenessUpdate,
} from 'y-protocols/awareness'

import { rust } from '@codemirror/lang-rust'
import { javascript } from '@codemirror/lang-javascript'
import { python } from '@codemirror/lang-python'
import { json } from '@codemirror/lang-json'
import { markdown, markdownLanguage } from '@codemirror/lang-markdown'
import { html } from '@codemirror/lang-html'
import { css } from '@codemirror/lang-css'
import { go } from '@codemirror/lang-go'
import { cpp } from '@codemirror/lang-cpp'
import { java } from '@codemirror/lang-java'
import { sql } from '@codemirror/lang-sql'
import { yaml } from '@codemirror/lang-yaml'
import { toml } from '@codemirror/legacy-modes/mode/toml'
import { shell } from '@codemirror/legacy-modes/mode/shell'

// The origin given to everything that arrived from the server, so that it
// is not sent back.
const REMOTE = Symbol('tandem-remote')

// Language name -> a function making its CodeMirror extension.
const LANGUAGES = {
  rust: () => rust(),
  javascript: () => javascript(),
  jsx: () => javascript({ jsx: true }),
  typescript: () => javascript({ typescript: true }),
  tsx: () => javascript({ typescript: true, jsx: true }),
  python: () => python(),
  json: () => json(),
  markdown: () =>
    markdown({ base: markdownLanguage, codeLanguages: fencedLanguage }),
  html: () => html(),
  css: () => css(),
  go: () => go(),
  cpp: () => cpp(),
  java: () => java(),
  sql: () => sql(),
  yaml: () => yaml(),
  toml: () => StreamLanguage.define(toml),
  shell: () => StreamLanguage.define(shell),
}

// File extension (lower case, no dot) -> language name.
const EXTENSIONS = {
  rs: 'rust',
  js: 'javascript',
  mjs: 'javascript',
  cjs: 'javascript',
  jsx: 'jsx',
  ts: 'typescript',
  mts: 'typescript',
  cts: 'typescript',
  tsx: 'tsx',
  py: 'python',
  pyi: 'python',
  json: 'json',
  md: 'markdown',
  markdown: 'markdown',
  html: 'html',
  htm: 'html',
  css: 'css',
  go: 'go',
  c: 'cpp',
  h: 'cpp',
  cc: 'cpp',
  cpp: 'cpp',
  cxx: 'cpp',
  hh: 'cpp',
  hpp: 'cpp',
  hxx: 'cpp',
  java: 'java',
  sql: 'sql',
  yaml: 'yaml',
  yml: 'yaml',
  toml: 'toml',
  sh: 'shell',
  bash: 'shell',
  zsh: 'shell',
}

// Whole file names (lower case) that say more than their extension.
const FILENAMES = {
  'cargo.lock': 'toml',
  'poetry.lock': 'toml',
  pipfile: 'toml',
  '.bashrc': 'shell',
  '.bash_profile': 'shell',
  '.zshrc': 'shell',
  '.profile': 'shell',
  '.envrc': 'shell',
}

// Names used after ``` in Markdown that differ from ours.
const FENCE_ALIASES = {
  rs: 'rust',
  js: 'javascript',
  ts: 'typescript',
  py: 'python',
  sh: 'shell',
  bash: 'shell',
  zsh: 'shell',
  console: 'shell',
  yml: 'yaml',
  c: 'cpp',
  'c++': 'cpp',
  golang: 'go',
}

/** The language name for a path ("rust", "typescript", ...) or "text". */
function languageFor(path) {
  const base = String(path || '').split(/[\\/]/).pop().toLowerCase()
  if (Object.prototype.hasOwnProperty.call(FILENAMES, base)) {
    return FILENAMES[base]
  }
  const dot = base.lastIndexOf('.')
  if (dot >= 0) {
    const ext = base.slice(dot + 1)
    if (Object.prototype.hasOwnProperty.call(EXTENSIONS, ext)) {
      return EXTENSIONS[ext]
    }
  }
  return 'text'
}

/** The CodeMirror Language for a Markdown code block's info string. */
function fencedLanguage(info) {
  let name = String(info || '').trim().toLowerCase()
  if (Object.prototype.hasOwnProperty.call(FENCE_ALIASES, name)) {
    name = FENCE_ALIASES[name]
  }
  if (name === 'markdown' || name === 'md') return markdownLanguage
  if (!Object.prototype.hasOwnProperty.call(LANGUAGES, name)) return null
  const support = LANGUAGES[name]()
  // LanguageSupport has .language; StreamLanguage is a Language itself.
  return support.language || support
}

function languageExtension(path) {
  const name = languageFor(path)
  return name === 'text' ? [] : LANGUAGES[name]()
}

const theme = EditorView.theme({
  '&': { height: '100%' },
  '.cm-scroller': {
    fontFamily:
      "ui-monospace, SFMono-Regular, Menlo, Consolas, 'Liberation Mono', 'DejaVu Sans Mono', monospace",
  },
})

function readOnlyExtension(readOnly) {
  return [EditorState.readOnly.of(readOnly), EditorView.editable.of(!readOnly)]
}

function warn(what, err) {
  console.warn(`TandemEditor: ${what} failed:`, err)
}

function bytes(u) {
  return u instanceof Uint8Array ? u : new Uint8Array(u)
}

/**
 * Opens an editor in `parent`.
 *
 * options: { path, name, colour, readOnly, onUpdate(Uint8Array), onAwareness(Uint8Array) }
 */
function open(parent, options) {
  const opts = options || {}
  const onUpdate = typeof opts.onUpdate === 'function' ? opts.onUpdate : null
  const onAwareness =
    typeof opts.onAwareness === 'function' ? opts.onAwareness : null
  const colour = String(opts.colour || '#e06c75')

  const doc = new Y.Doc()
  const ytext = doc.getText('content')
  const awareness = new Awareness(doc)
  const undoManager = new Y.UndoManager(ytext)

  // Local document changes go to the server; remote ones are not echoed.
  doc.on('update', (update, origin) => {
    if (origin === REMOTE || !onUpdate) return
    try {
      onUpdate(update)
    } catch (err) {
      warn('onUpdate', err)
    }
  })

  // Only this client's own awareness state is sent (including its removal).
  // Sends are coalesced and made from a microtask: awareness changes also
  // happen inside calls from Rust (open, applyUpdate, gotoLine, ...), and
  // calling back into Rust from there would be re-entrant. destroy() flushes
  // synchronously, since the callbacks may be dropped right after it.
  let awarenessPending = false
  const sendAwareness = () => {
    if (!awarenessPending) return
    awarenessPending = false
    try {
      onAwareness(encodeAwarenessUpdate(awareness, [awareness.clientID]))
    } catch (err) {
      warn('onAwareness', err)
    }
  }
  awareness.on('update', ({ added, updated, removed }, origin) => {
    if (origin === REMOTE || !onAwareness || awarenessPending) return
    const mine = added
      .concat(updated, removed)
      .some((id) => id === awareness.clientID)
    if (!mine) return
    awarenessPending = true
    queueMicrotask(sendAwareness)
  })

  awareness.setLocalStateField('user', {
    name: String(opts.name || 'Anonymous'),
    color: colour,
    colorLight: colour + '33',
  })

  const readOnly = new Compartment()
  const view = new EditorView({
    parent,
    state: EditorState.create({
      doc: ytext.toString(),
      extensions: [
        // Undo/redo through Y.UndoManager (this client's own changes
        // only), ahead of basicSetup's history keymap.
        Prec.high(keymap.of(yUndoManagerKeymap)),
        basicSetup,
        languageExtension(opts.path),
        theme,
        readOnly.of(readOnlyExtension(!!opts.readOnly)),
        yCollab(ytext, awareness, { undoManager }),
      ],
    }),
  })

  let destroyed = false

  return {
    view,

    applyUpdate(u) {
      if (destroyed) return
      try {
        Y.applyUpdate(doc, bytes(u), REMOTE)
      } catch (err) {
        warn('applyUpdate', err)
      }
    },

    applyAwareness(u) {
      if (destroyed) return
      try {
        applyAwarenessUpdate(awareness, bytes(u), REMOTE)
      } catch (err) {
        warn('applyAwareness', err)
      }
    },

    setReadOnly(flag) {
      if (destroyed) return
      try {
        view.dispatch({
          effects: readOnly.reconfigure(readOnlyExtension(!!flag)),
        })
      } catch (err) {
        warn('setReadOnly', err)
      }
    },

    text() {
      try {
        return ytext.toString()
      } catch (err) {
        warn('text', err)
        return ''
      }
    },

    gotoLine(n) {
      if (destroyed) return
      try {
        const lines = view.state.doc.lines
        const want = Math.floor(Number(n)) || 1
        const line = view.state.doc.line(Math.min(Math.max(want, 1), lines))
        view.dispatch({
          selection: { anchor: line.from },
          effects: EditorView.scrollIntoView(line.from, { y: 'center' }),
        })
      } catch (err) {
        warn('gotoLine', err)
      }
    },

    clientId() {
      return doc.clientID
    },

    // What this document has that the server's state `u` (a whole-document
    // update) lacks: edits made while the connection was down, to send once
    // it is back. Empty when there are none.
    missingFrom(u) {
      if (destroyed) return new Uint8Array()
      try {
        // Items they lack and every deletion (deletions carry no clock).
        const theirs = Y.encodeStateVectorFromUpdate(bytes(u))
        return Y.encodeStateAsUpdate(doc, theirs)
      } catch (err) {
        warn('missingFrom', err)
        return new Uint8Array()
      }
    },

    destroy() {
      if (destroyed) return
      destroyed = true
      try {
        view.destroy()
      } catch (err) {
        warn('destroy (view)', err)
      }
      try {
        // Announces this client's removal through onAwareness, now.
        awareness.destroy()
        sendAwareness()
      } catch (err) {
        warn('destroy (awareness)', err)
      }
      try {
        undoManager.destroy()
        doc.destroy()
      } catch (err) {
        warn('destroy (doc)', err)
      }
    },
  }
}

globalThis.TandemEditor = { open, languageFor }
